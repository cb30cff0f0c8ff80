"""``clip``: the CLIP-score filter (DataComp's baseline), on whatever embeddings there are.

Each pair's score is the cosine similarity of its image and caption embeddings (``clip_sim``).
``keep_fraction`` applies DataComp's rule: the top fraction by similarity is clean
(``clean_prob`` 1), the rest noisy (0), ties broken by position. Otherwise ``clean_prob`` says
how likely each pair is to be clean, read two ways:

- where the space was not trained on the corpus (precomputed vectors, a pretrained CLIP, a CCA
  cross-fitted fold by fold), against shuffled pairs (:mod:`ncclean.methods.null_rate`): the
  noise rate is estimated from them, and ``clean_prob`` is one minus the local false discovery
  rate, so that a pair at 0.8 is clean four times in five (its estimates against the injected
  rates: ``benchmarks/results/clip.md``);
- otherwise (a matcher trained on the corpus, or ``posterior="mixture"``), the posterior of the
  higher-mean component of the shared two-component mixture fitted to the similarities, and its
  noisy weight as the estimate. A mixture always finds two components, so it calls a share of
  even a clean corpus noisy.

Where the embeddings come from:

- precomputed vectors (``--image-emb-col`` and ``--text-emb-col`` with the ``column`` towers):
  their raw cosine, no training at all. This is the CLIP score when the columns hold CLIP
  embeddings (``ncclean embed --encoder clip`` writes them). When they come from two unrelated
  encoders (``align="cca"``, and by default whenever their widths differ) the cosine is taken
  after a ridge CCA fitted on the corpus's own pairs puts both in one space
  (:mod:`ncclean.methods.align`); this is ours, not DataComp's, which assumes a CLIP. Pairs
  that all show one image (or all carry one caption) give a CCA nothing to fit: then no pair can
  be told from another, every pair is ``vague`` at 0.5, and the record's report says why.
- a pretrained CLIP (``clip`` towers: ``--clip-pretrained`` or ``--clip-checkpoint``): the raw
  cosine of its frozen features, computed (and cached) here; DataComp's CLIP score. With
  ``--finetune full`` the same cosine, computed by the whole model from pixels and tokens.
- a loaded matcher (``--load-matcher``): its joint embeddings.
- otherwise, where no pretrained CLIP exists: a matcher warmed up on the corpus itself, exactly
  ``gmm``'s warm-up (mean hinge over in-batch negatives, ``warmup_epochs`` by
  :func:`ncclean.methods.gmm.schedule`). That is a plain loss-free similarity filter on a matcher
  that has seen the noise, the prototype's floor, not a pretrained model's judgement.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

import numpy as np

from ncclean.data.results import VAGUE
from ncclean.errors import BadOptionError
from ncclean.methods import neighbours as near
from ncclean.methods import spaces
from ncclean.methods.align import (
    Alignment,
    PairSums,
    alignment_from_sums,
    pair_sums,
    shared_fits,
    unalignable,
)
from ncclean.methods.applied import Application
from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.cca_rules import (
    CONVENTION_COUNT,
    CONVENTION_SHARE,
    CROSS_FIT_WIDTHS,
    DIMS,
    RIDGE,
    SMALL_FIT_WIDTHS,
    TRUSTED_FIT_WIDTHS,
    TRUSTED_RIDGE,
    WIDE_DIMS,
    WIDE_DIMS_WIDTHS,
    WIDE_RIDGE,
    WIDE_RIDGE_WIDTHS,
    CorpusShape,
    discounts,
    ranks_cross_fitted,
)
from ncclean.methods.clip_applied import ClipSimilarity
from ncclean.methods.clip_posterior import read_posterior, top_fraction
from ncclean.methods.clip_widths import WIDTHS, averaged, member_seed
from ncclean.methods.conventions import (
    convention_discount,
    describe_discount,
    held_out_similarity,
    repeated_caption_discount,
)
from ncclean.methods.null_rate import NullEstimate, null_noise_rate
from ncclean.methods.prior import bundled_prior
from ncclean.methods.scripts import MIN_PAIRS, fit_centring
from ncclean.methods.unit import raw_embeddings
from ncclean.models.features import Features
from ncclean.models.registry import raw_source
from ncclean.train.scoring import Embeddings, embed, kept_dtype
from ncclean.train.warmup import starting_matcher, warmed_matcher

CROSS_FIT_FOLDS = 10
#: The fewest pairs a cross-fitted null reads in a fold; a corpus of fewer than
#: ``CROSS_FIT_FOLDS`` times this is read on fewer folds, down to two (under twice this, no
#: null: its in-sample cosines are read by a mixture).
CROSS_FIT_FOLD_PAIRS = 20
#: The smallest corpus on which a matcher warmed up from scratch ranks well (the rule of
#: :attr:`~ncclean.methods.base.Method.min_pairs`; benchmarks/results/small-corpora.md).
SCRATCH_MIN_PAIRS = 1200


@dataclass
class Clip(Method):
    """Cosine similarity, then a clean probability against shuffled pairs or from a
    two-component mixture, or ``keep_fraction``'s top-fraction rule (module docstring)."""

    name: ClassVar[str] = "clip"
    summary: ClassVar[str] = ("CLIP score (DataComp): cosine similarity of the pair's embeddings, "
                              "read against shuffled pairs, a mixture or a top-fraction cut; no "
                              "training on embeddings (two encoders' columns: a CCA fitted on the "
                              "corpus first)")
    trains_matcher: ClassVar[bool] = False
    #: With a CCA fitted on the corpus; a matcher warmed up on it from scratch needs
    #: :data:`SCRATCH_MIN_PAIRS`, one fixed space nothing (:meth:`measured_minimum`).
    min_pairs: ClassVar[int] = 200
    min_pairs_where: ClassVar[str] = (
        f"with a CCA fitted on the corpus ({SCRATCH_MIN_PAIRS:,} with a matcher warmed up on it, "
        "as measured from scratch; none in one fixed space: a pretrained CLIP, a loaded "
        "matcher, vector columns of one width read as they are)")
    application: ClassVar[Application] = ClipSimilarity()
    departures: ClassVar[tuple[str, ...]] = (
        "Unless keep_fraction is set, clean_prob is a probability (one minus the local false "
        "discovery rate against shuffled pairs, or a mixture posterior), not DataComp's "
        "top-fraction cut (benchmarks/results/clip.md).",
        "Columns from two unrelated encoders are first aligned by a ridge CCA fitted on the "
        "corpus's own pairs (align), which DataComp, assuming one CLIP, does not need.",
        "Where no pretrained CLIP exists the similarity is that of a matcher warmed up on the "
        "corpus itself (NCR's warm-up), not a pretrained model's judgement.",
        "With a CCA, a repeated caption's score loses what only its own pairs taught the fit "
        "(conventions; benchmarks/results/natural-noise.md) where captions that many pairs "
        "share make a convention; elsewhere the fit is trusted and shrunk less "
        "(benchmarks/results/rules.md). A fit of at most 20,000 pairs adds the neighbours' "
        "agreement to the cosine, in a corpus of conventions its image side alone "
        "(benchmarks/results/neighbours.md).",
        "Before the CCA, each writing system's caption vectors are shifted to the corpus's mean "
        "where two or more systems carry enough pairs (benchmarks/results/languages.md).",
        "Where pairs are ranked cross-fitted or the fit has fewer distinct captions or images "
        "than the vectors' summed width, clean_prob is the mean of four fits keeping 32, 64, "
        "128 and 256 directions (align_widths; benchmarks/results/rules.md).",
    )

    keep_fraction: float | None = param(
        None, low=0, high=1, low_open=True,
        rule="unset: a clean probability (see posterior), not a top fraction",
        help="DataComp's rule: this top fraction by similarity is clean (1), the rest noisy (0)")
    warmup_epochs: int | None = param(
        None, low=1, rule="gmm's warm-up rule for the corpus size (only when a matcher is "
        "warmed up)", help="epochs of the warm-up when no pretrained similarity exists")
    batch_size: int = param(128, low=2, help="pairs per batch of the warm-up")
    lr: float = param(2e-4, low=0, low_open=True, help="learning rate of the warm-up")
    align: Literal["auto", "none", "cca"] = param(
        "auto", help="precomputed vectors: raw cosine (none), a ridge CCA first (cca), or cca "
        "when the widths differ (auto)")
    align_dims: int | None = param(
        None, low=1, rule=f"{WIDE_DIMS} for a trusted fit (see conventions) on at least "
        f"{WIDE_DIMS_WIDTHS} times the two vectors' summed width in distinct captions and "
        f"distinct images, else {DIMS}", help="CCA directions kept")
    align_widths: Literal["auto", "one", "four"] = param(
        "auto", help="with a CCA: one fit of align_dims directions (one), or clean_prob "
        f"averaged over fits of {', '.join(map(str, WIDTHS))} directions (four); auto averages "
        "where pairs are ranked cross-fitted (see rank) or the distinct captions or images are "
        f"fewer than {TRUSTED_FIT_WIDTHS} times the two vectors' summed width, and align_dims is "
        "not given")
    width_folds: Literal["auto", "shared", "own"] = param(
        "auto", help="with four widths averaged (see align_widths): every width on the same "
        "folds and shuffles of the pairs (shared), or each on its own (own: about +0.005 AUROC "
        "on 300-pair corpora, at 1.5-2 times the fit's time; benchmarks/results/rules.md); "
        "auto is own where pairs are ranked cross-fitted (see rank), shared elsewhere")
    align_ridge: float | None = param(
        None, low=0, rule=f"{RIDGE:g} in a corpus of conventions (see conventions) or where "
        f"the distinct captions or images are fewer than {SMALL_FIT_WIDTHS:g} times the two "
        f"vectors' summed width, {WIDE_RIDGE:g} for a trusted fit on at least "
        f"{WIDE_RIDGE_WIDTHS} times the width, else {TRUSTED_RIDGE:g}",
        help="CCA ridge shrinkage")
    neighbours: int | None = param(
        None, low=0, rule=f"{near.K} where a CCA is fitted on at most {near.MAX_PAIRS:,} pairs "
        f"({near.K_CONVENTIONS} in a corpus of conventions, see conventions), else 0",
        help="with a CCA: add the neighbours' agreement to the cosine, read from this many "
        "nearest captions and images (0: none)")
    neighbour_sides: Literal["auto", "both", "a"] = param(
        "auto", help="with neighbours: a counts only the image against the images of captions "
        "like its caption; both adds the caption against the captions of images like its image; "
        "auto is a in a corpus of conventions (see conventions), where the second vouches for a "
        "collection's label by the label itself, and both elsewhere")
    neighbour_weight: float | None = param(
        None, low=0, rule="read from the corpus: the weights that best part its pairs from "
        f"shuffled ones (a linear discriminant); {near.WEIGHT} where it has no null of shuffled "
        "pairs or its cosine does not part them",
        help="each side of the neighbours' agreement has half this times the cosines' spread")
    prior: Literal["auto", "off"] = param(
        "auto", help="with neighbours whose weights are read: add the pair's cosine in a CCA "
        "of the default towers fitted on named icons (shipped), weighed as the corpus says "
        "(auto: where the vectors are 1,280- and 384-wide, as the default towers'), or not (off)")
    centre_scripts: Literal["auto", "none"] = param(
        "auto", help="with a CCA: shift each writing system's caption vectors (Latin, "
        "Cyrillic, CJK, Arabic, ...) to the corpus's mean, so that languages mixed in one corpus "
        f"share one space (auto: where two or more systems have {MIN_PAIRS}+ pairs each), or "
        "leave them (none)")
    posterior: Literal["auto", "mixture"] = param(
        "auto", help="clean_prob against shuffled pairs where they are a null (auto), or always "
        "from a two-component mixture")
    rank: Literal["auto", "in-sample", "cross-fitted"] = param(
        "auto", help="with a CCA: rank each pair by the fit on all pairs (in-sample) or by a fit "
        "on the other nine tenths (cross-fitted; under 200 pairs, on as many folds as hold 20 "
        "pairs each); auto cross-fits where the distinct captions "
        f"or images are fewer than {SMALL_FIT_WIDTHS:g} times the two vectors' summed width, "
        f"or a corpus of conventions has fewer than {CROSS_FIT_WIDTHS} times it in pairs")
    conventions: Literal["auto", "discount", "repeated", "trust"] = param(
        "auto", help="with a CCA: rank a repeated caption's pairs less what only its own pairs "
        "taught the fit (discount: a collection's label is not a description; a single "
        "caption's pair loses its own memorisation too), discount repeated captions only "
        "(repeated), or rank as fitted (trust); auto trusts a fit without conventions (fewer "
        f"than {CONVENTION_SHARE:.0%} of the pairs carry a caption {CONVENTION_COUNT} or more "
        f"pairs share) on at least {TRUSTED_FIT_WIDTHS} times the two vectors' summed width in "
        "distinct captions and distinct images, and discounts elsewhere")

    def own_partitions(self) -> str | None:
        if self.keep_fraction is None:
            return None
        return (f"-p keep_fraction={self.keep_fraction:g} draws the partitions itself (that top "
                "share clean, clean_prob 1; the rest noisy, 0)")

    def fit(self, features: Features, context: Context) -> MethodResult:
        shape = CorpusShape.of(features.image_group, features.text_group, _width(features)) \
            if self._cca_on_vectors(features, context) else None
        if self._averages_widths(shape):
            own_folds = self.width_folds == "own" or (
                self.width_folds == "auto" and ranks_cross_fitted(self.rank, shape))
            with shared_fits(max(WIDTHS)):
                return averaged([replace(self, align_dims=width, align_widths="one")
                                 ._fit(features, replace(context, seed=member_seed(
                                     context.seed, k, own_folds)), shape)
                                 for k, width in enumerate(WIDTHS)])
        return self._fit(features, context, shape)

    def _fit(self, features: Features, context: Context, shape: CorpusShape | None) \
            -> MethodResult:
        """One fit; ``shape`` is the corpus's (:class:`~ncclean.methods.cca_rules.CorpusShape`)
        where a CCA is fitted on its vector columns, else ``None``."""
        config = context.matcher_config
        matcher = alignment = space = raw = moments = centring = None
        pretrained = _pretrained(context)
        if self.conventions in ("discount", "repeated") and shape is None:
            # before any work: a matcher warmed up from scratch trains
            raise BadOptionError(f"conventions={self.conventions} needs a CCA fitted on the "
                                 "corpus (two vector columns, align cca or auto): only such a "
                                 "space learns its captions' conventions")
        if pretrained:
            matcher, source = starting_matcher(context)
            embeddings = embed(matcher, features, context.device, dtype=kept_dtype(features))
            if context.initial is None:  # a pretrained CLIP: not fitted on this corpus
                space = spaces.fixed_space(embeddings)
        elif (source := raw_source(config)) is not None:
            if self.centre_scripts == "auto" and self._fits_cca(features):
                centring = fit_centring(features)
            if centring is not None:
                features = centring.apply(features)
            raw = raw_embeddings(features)
            embeddings, alignment, moments = self._aligned(raw, features, shape)
            if embeddings is None:
                return self._unaligned(features, source, unalignable(moments))
            if alignment is not None:
                source += f", aligned by a ridge CCA on the corpus ({alignment.dims} directions)"
                space = spaces.cca_space(raw, features, alignment.dims, alignment.ridge)
            else:
                space = spaces.fixed_space(embeddings)
        elif self.align == "cca":
            raise BadOptionError("align=cca applies to precomputed vectors (--image-emb-col and "
                                 "--text-emb-col) or a frozen CLIP; a matcher's embeddings "
                                 "already share one space")
        else:
            matcher, embeddings, source = warmed_matcher(features, context, self.warmup_epochs,
                                                         self.batch_size, self.lr)
        similarity = embeddings.pair_similarity(features)
        report: dict = {"embeddings": source}
        if centring is not None:
            report["scripts"] = centring.describe()
        neighbours = term = None
        if alignment is not None:
            report["alignment"] = alignment.describe()
            if (k := near.neighbour_count(self.neighbours, features.n_pairs,
                                          shape.has_conventions)) > 0:
                neighbours = near.fit_neighbours(
                    features.image_data, features.text_data, features.image_group,
                    features.text_group, similarity, k=k,
                    weight=near.WEIGHT if self.neighbour_weight is None else self.neighbour_weight,
                    sides=near.neighbour_sides(self.neighbour_sides, shape.has_conventions),
                    prior=None if self.neighbour_weight is not None else bundled_prior(
                        self.prior, features.image_data.shape[1], features.text_data.shape[1]))
        discount = caption_discount = None
        undiscounted = space
        if alignment is not None and discounts(self.conventions, shape, report):
            held_out = held_out_similarity(raw.images, raw.texts, features.image_group,
                                           features.text_group, alignment.dims, alignment.ridge,
                                           seed=context.seed, total=moments)
            discount = convention_discount(similarity, held_out, features.text_group)
            caption_discount = repeated_caption_discount(discount, features.text_group,
                                                         len(features.text_data))
            if self.conventions == "repeated":  # a single caption's pair keeps its score
                discount = caption_discount[features.text_group]
            # shuffled pairs keep their caption's discount
            space = spaces.discounted(space, caption_discount)
            report["conventions"] = describe_discount(discount, features.text_group)
        cross_fits = space is not None and alignment is not None \
            and ranks_cross_fitted(self.rank, shape)
        read_null = functools.partial(
            null_noise_rate, image_group=features.image_group, text_group=features.text_group,
            seed=context.seed, **(dict(folds=cross_fit_folds(features.n_pairs),
                                       sample=features.n_pairs,
                                       min_pairs=CROSS_FIT_FOLD_PAIRS) if cross_fits
                                  else dict(folds=1 if alignment is None else 5)))
        if neighbours is not None:
            read = None
            if self.neighbour_weight is None:  # read from the null of the cosine alone
                read = near.read_weights(neighbours, read_null(space))
            neighbours = read or neighbours
            term = neighbours.pair_term()
            space = near.with_neighbours(undiscounted, neighbours)
            if caption_discount is not None:
                space = spaces.discounted(space, caption_discount)
            report["neighbours"] = neighbours.describe(read=read is not None)
        null: NullEstimate | None = None if space is None else read_null(space)
        if cross_fits and null is not None:  # every pair scored by a fit that did not see it
            similarity = np.empty(features.n_pairs)
            similarity[null.rows] = null.scores
            if term is not None:  # clip_sim is the cosine; the term is its own column
                similarity -= term
            if caption_discount is not None:  # a held-out pair memorised nothing of its own
                discount = caption_discount[features.text_group]
                similarity += discount
            report["rank"] = f"cross-fitted ({null.folds} folds)"
        if space is not None:
            report["null"] = None if null is None else null.describe()
        columns = {"clip_sim": similarity}
        if term is not None:
            columns["clip_neighbours"] = term.astype(np.float32)
            similarity = similarity + term
        if discount is not None:
            columns["clip_convention"] = discount.astype(np.float32)
            similarity = similarity - discount
        read_as = read_posterior(similarity, null, self.keep_fraction, self.posterior,
                                 context.seed)
        report.update(read_as.report)
        return MethodResult(clean_prob=read_as.clean_prob, columns=columns,
                            matcher=matcher, embeddings=embeddings, noise_rate=read_as.noise_rate,
                            noise_interval=read_as.interval, report=report, alignment=alignment,
                            neighbourhood=None if neighbours is None else neighbours.hood,
                            scripts=centring)

    def _unaligned(self, features: Features, source: str, reason: str) -> MethodResult:
        """The result where the vectors need a CCA that the pairs cannot give (``reason``, the
        end of "it needs ..."): no pair can be told from another, so every one has ``clip_sim``
        0, ``clean_prob`` 0.5 and partition ``vague`` (kept for review, neither trusted nor
        discarded), no noise estimate and no space for the stages; ``keep_fraction``'s rule
        still keeps its share, by position."""
        n = features.n_pairs
        similarity = np.zeros(n)
        report = {"embeddings": source, "alignment": None, "warnings": [
            f"clip fitted no CCA between the image and caption vectors (it needs {reason}), so "
            "no pair could be told from another: every pair is vague, clean_prob 0.5"]}
        if self.keep_fraction is not None:
            clean_prob = top_fraction(similarity, self.keep_fraction)
            return MethodResult(clean_prob=clean_prob, columns={"clip_sim": similarity},
                                noise_rate=1.0 - float(clean_prob.mean()), report=report)
        return MethodResult(clean_prob=np.full(n, 0.5), columns={"clip_sim": similarity},
                            report=report, partition=np.full(n, VAGUE, dtype=object))

    def measured_minimum(self, features: Features, context: Context) -> int:
        """``min_pairs`` where a CCA is fitted on the corpus; :data:`SCRATCH_MIN_PAIRS` for a
        matcher warmed up on it (measured with both towers from scratch); none in one fixed
        space (a pretrained CLIP, a loaded matcher, vector columns read as they are), whose
        cosine ranks the pairs alike at any size (``benchmarks/results/small-corpora.md``)."""
        if self._cca_on_vectors(features, context):
            return self.min_pairs
        if _pretrained(context) or raw_source(context.matcher_config) is not None:
            return 0
        return SCRATCH_MIN_PAIRS

    def _cca_on_vectors(self, features: Features, context: Context) -> bool:
        """Whether a CCA is fitted on the corpus's own vector columns (no pretrained model)."""
        return not _pretrained(context) and raw_source(context.matcher_config) is not None \
            and self._fits_cca(features)

    def _averages_widths(self, shape: CorpusShape | None) -> bool:
        """Whether ``clean_prob`` is averaged over :data:`~ncclean.methods.clip_widths.WIDTHS`
        (``align_widths``); ``shape`` as :meth:`_fit` takes it."""
        if self.align_widths == "one":
            return False
        if self.align_widths == "four":
            if self.align_dims is not None or self.keep_fraction is not None:
                raise BadOptionError("align_widths=four sets the CCA's widths and reads "
                                     "clean_prob as a probability: leave align_dims and "
                                     "keep_fraction unset")
            if shape is None:
                raise BadOptionError("align_widths=four needs a CCA fitted on the corpus (two "
                                     "vector columns, align cca or auto)")
            return True
        if self.align_dims is not None or self.keep_fraction is not None or shape is None:
            return False
        return ranks_cross_fitted(self.rank, shape) or shape.few_entries

    def _fits_cca(self, features: Features) -> bool:
        """Whether ``align`` asks for a CCA on these vector columns: ``cca``, or ``auto`` when
        their widths differ."""
        widths = features.image_data.shape[1], features.text_data.shape[1]
        return self.align == "cca" or (self.align == "auto" and widths[0] != widths[1])

    def _aligned(self, embeddings: Embeddings, features: Features, shape: CorpusShape | None) \
            -> tuple[Embeddings | None, Alignment | None, PairSums | None]:
        """The embeddings in a CCA space fitted on the pairs, with the fit and the pairs'
        moments, where ``align`` asks for it; ``None``, ``None`` and the moments where it asks
        for one that the pairs cannot give (:func:`~ncclean.methods.align.unalignable`);
        otherwise the embeddings as they are and ``None``, ``None``. ``align_dims`` and
        ``align_ridge`` left ``None`` are read from ``shape``."""
        widths = embeddings.images.shape[1], embeddings.texts.shape[1]
        if self.align == "none" and widths[0] != widths[1]:
            raise BadOptionError(
                f"the image and caption vectors have different widths ({widths[0]} and "
                f"{widths[1]}), so they share no space to take a cosine in; use -p align=cca "
                "(or leave align at auto) to fit one on the corpus")
        if not self._fits_cca(features):
            return embeddings, None, None
        moments = pair_sums(embeddings.images, embeddings.texts, features.image_group,
                            features.text_group)
        if unalignable(moments) is not None:
            return None, None, moments
        alignment = alignment_from_sums(
            moments, shape.dims if self.align_dims is None else self.align_dims,
            shape.ridge if self.align_ridge is None else self.align_ridge)
        dtype = kept_dtype(features)
        return Embeddings(images=alignment.project_images(embeddings.images, dtype),
                          texts=alignment.project_texts(embeddings.texts, dtype)), alignment, \
            moments


def cross_fit_folds(pairs: int) -> int:
    """How many folds a cross-fitted null of ``pairs`` pairs reads: :data:`CROSS_FIT_FOLDS`, or
    as many as give each :data:`CROSS_FIT_FOLD_PAIRS` pairs, at least two."""
    return max(2, min(CROSS_FIT_FOLDS, pairs // CROSS_FIT_FOLD_PAIRS))


def _width(features: Features) -> int:
    """The image and caption vectors' summed width."""
    return features.image_data.shape[1] + features.text_data.shape[1]


def _pretrained(context: Context) -> bool:
    """Whether the similarity starts from a loaded matcher or a pretrained model."""
    config = context.matcher_config
    return context.initial is not None or (config is not None and config.starts_pretrained)
