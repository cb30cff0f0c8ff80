"""The options of a scoring run, in four small frozen groups shared by the command line and the
library: the matcher (:class:`MatcherOptions`), the cut (:class:`Cut`), the stages after the method
(:class:`StageOptions`) and the run itself (:class:`RunOptions`).

Each group checks its own values when it is built (a bad value is one
:class:`~ncclean.errors.BadOptionError` line), and the scoring run's sidecar records every group
whole (:func:`options_record`), so no option can be left out of the record. Values that depend on
the corpus or the machine (which encoder ``auto`` picks, which device) are resolved later and
recorded beside them.

This module imports neither numpy nor torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from ncclean.errors import BadOptionError
from ncclean.records import as_record

if TYPE_CHECKING:
    import numpy as np

PathLike = str | os.PathLike

FINETUNE = ("heads", "full")
SIGNIFICANCE = ("specificity", "update", "off")
WRITES = ("all", "scores")


def _at_least(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) \
            or value < low:
        raise BadOptionError(f"{name} must be at least {low}, got {value!r}")


@dataclass(frozen=True)
class MatcherOptions:
    """The matcher a method trains or starts from.

    ``image_encoder``: ``pixels`` (a CNN on the decoded images), ``column`` (the corpus's image
    embedding column) or ``clip``; ``text_encoder``: ``tokens`` (a GRU over words), ``e5``,
    ``column`` or ``clip``; ``auto`` picks ``column`` when the embedding column is named, else
    ``clip`` when CLIP weights are given. ``clip_model`` (default ViT-B-32) with
    ``clip_pretrained`` (a tag, downloaded) or ``clip_checkpoint`` (a file) are the weights of the
    ``clip`` towers; ``finetune="full"`` trains the whole CLIP instead of heads. ``load_matcher``:
    a saved matcher to start from, which brings its own encoders.
    """

    image_encoder: str = "auto"
    text_encoder: str = "auto"
    embed_dim: int = 256
    image_size: int = 64
    clip_model: str | None = None
    clip_pretrained: str | None = None
    clip_checkpoint: PathLike | None = None
    finetune: str = "heads"
    load_matcher: PathLike | None = None

    def __post_init__(self) -> None:
        _at_least("--embed-dim", self.embed_dim, 2)
        _at_least("--image-size", self.image_size, 8)
        if self.finetune not in FINETUNE:
            raise BadOptionError(f"--finetune must be heads or full, got {self.finetune!r}")

    def clip(self) -> dict[str, Any]:
        """The CLIP settings as :func:`ncclean.models.resolve.matcher_config` takes them."""
        return {"model": self.clip_model, "pretrained": self.clip_pretrained,
                "checkpoint": self.clip_checkpoint, "finetune": self.finetune}


@dataclass(frozen=True)
class Cut:
    """How clean probabilities become partitions (:func:`ncclean.stages.partition.partition`).

    ``clean_prob >= clean_above`` is clean, ``< noisy_below`` noisy, between them vague; or, with
    ``noise_rate`` (a share in [0, 1], or ``"auto"``: the method's estimate, filled in by
    :meth:`with_estimate`), the lowest share is noisy. ``noisy_recall`` and ``review_recall``
    widen the thresholds' partitions by what the scores expect: ``noisy`` is at least the lowest
    pairs that hold ``noisy_recall`` of the expected noisy pairs (the sum of ``1 - clean_prob``),
    ``noisy`` and ``vague`` together at least those holding ``review_recall``
    (:func:`ncclean.data.results.recall_threshold`); :meth:`with_recall` fills in
    ``recall_noisy_below`` and ``recall_clean_above`` from a run's scores, and
    :meth:`thresholds` gives the thresholds in force. ``rare_clean_above``: a lower clean
    threshold for pairs whose caption occurs at most ``rare_count`` times among the valid pairs;
    ``rare_count`` also says which clean captions the specificity stage leaves significant.
    ``queue_by_estimate``: where the thresholds flag more pairs than the method's estimate of
    the noise says there are, the review queue (``noisy`` with ``vague``) is cut back to the
    lower end of that estimate's interval (:meth:`with_queue` fills in ``queue_clean_above``).
    ``Cut()`` is the single 0.5 cut; ``score`` uses :data:`DEFAULT_CUT`. A ``noise_rate``
    replaces the thresholds: with one, thresholds other than these two defaults are an error
    (they would be ignored), and the record leaves them out.
    """

    clean_above: float = 0.5
    noisy_below: float = 0.5
    noise_rate: float | str | None = None
    rare_clean_above: float | None = None
    rare_count: int = 2
    preset: str | None = None  # the PRESETS entry this cut came from, if any
    noisy_recall: float | None = None
    review_recall: float | None = None
    recall_noisy_below: float | None = None  # filled in by with_recall
    recall_clean_above: float | None = None
    queue_by_estimate: bool = False
    queue_clean_above: float | None = None  # filled in by with_queue

    def __post_init__(self) -> None:
        self._check_recall()
        if not 0.0 <= self.noisy_below <= self.clean_above <= 1.0:
            raise BadOptionError(
                f"need 0 <= --noisy-below ({self.noisy_below}) <= --clean-above "
                f"({self.clean_above}) <= 1")
        if isinstance(self.noise_rate, str) and self.noise_rate != "auto":
            raise BadOptionError(f"--noise-rate must be a number in [0, 1] or auto, got "
                                 f"{self.noise_rate!r}")
        if isinstance(self.noise_rate, int | float) and not 0.0 <= self.noise_rate <= 1.0:
            raise BadOptionError(f"--noise-rate must lie in [0, 1], got {self.noise_rate}")
        if self.noise_rate is not None and (self.clean_above, self.noisy_below) not in _UNSET:
            raise BadOptionError(
                f"--noise-rate cuts by a share and wins over thresholds, so --clean-above "
                f"{self.clean_above} / --noisy-below {self.noisy_below} would be ignored; give "
                "either --noise-rate or the thresholds")
        if self.rare_clean_above is not None:
            if self.noise_rate is not None:
                raise BadOptionError("--rare-clean-above lowers a threshold; it does not combine "
                                     "with --noise-rate")
            if not 0.0 <= self.rare_clean_above <= self.clean_above:
                raise BadOptionError(
                    f"need 0 <= --rare-clean-above ({self.rare_clean_above}) <= --clean-above "
                    f"({self.clean_above})")
        _at_least("--rare-count", self.rare_count, 1)

    def _check_recall(self) -> None:
        """The recall bands belong to the review cut: a share cut (``noise_rate``) and a
        training cut (``rare_clean_above``) drop a band left at the default's value and refuse
        any other; the resolved thresholds exist only beside their band."""
        other = "--noise-rate" if self.noise_rate is not None else (
            "--rare-clean-above" if self.rare_clean_above is not None else None)
        for name, default, reached in (("noisy_recall", _DEFAULT_RECALL[0], "recall_noisy_below"),
                                       ("review_recall", _DEFAULT_RECALL[1],
                                        "recall_clean_above")):
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            if other is not None and value == default:  # the default's band, not asked for
                object.__setattr__(self, name, value := None)
            if value is not None and not 0.0 < value <= 1.0:
                raise BadOptionError(f"{flag} must lie in (0, 1] (0 on the command line turns "
                                     f"it off), got {value}")
            if value is not None and other is not None:
                raise BadOptionError(f"{flag} widens the review cut's thresholds; {other} makes "
                                     "another cut, so give one or the other")
            if value is None:
                object.__setattr__(self, reached, None)  # no band, no threshold of one
            elif getattr(self, reached) is not None and not 0.0 <= getattr(self, reached) <= 1.0:
                raise ValueError(f"{reached} must lie in [0, 1], got {getattr(self, reached)}")
        if other is not None:  # the estimate sizes the review queue, not another cut
            object.__setattr__(self, "queue_by_estimate", False)
        if not self.queue_by_estimate:
            object.__setattr__(self, "queue_clean_above", None)
        if None not in (self.noisy_recall, self.review_recall) \
                and self.noisy_recall > self.review_recall:
            raise BadOptionError(
                f"need --noisy-recall ({self.noisy_recall}) <= --review-recall "
                f"({self.review_recall}; the defaults are {_DEFAULT_RECALL[0]} and "
                f"{_DEFAULT_RECALL[1]}): noisy is part of what is flagged")

    @property
    def auto(self) -> bool:
        """Whether the noise rate is the method's estimate, still to be filled in."""
        return self.noise_rate == "auto"

    def with_estimate(self, estimate: float | None, method: str = "the method") -> Cut:
        """This cut with an ``"auto"`` noise rate replaced by the method's ``estimate``, every
        other field kept; a cut that is not ``auto`` is returned as it is."""
        if not self.auto:
            return self
        if estimate is None:
            raise BadOptionError(f"--noise-rate auto: method {method!r} gives no estimate")
        return replace(self, noise_rate=float(estimate))

    @classmethod
    def from_record(cls, record: dict) -> Cut:
        """The cut a sidecar's or a fit's ``cut`` record holds (keys that are no field are
        left out; a record from before the recall bands has none)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names and v is not None}
                   | {"noise_rate": record.get("noise_rate")})

    def with_recall(self, clean_prob: np.ndarray) -> Cut:
        """This cut with ``recall_noisy_below`` and ``recall_clean_above`` computed from the
        run's ``clean_prob`` (``(n,)``, every scored pair), every other field kept; a cut
        without recall bands is returned as it is. Computed from the scores given, not from
        any earlier resolution, so a rescaled sample can be resolved again."""
        if self.noise_rate is not None or (self.noisy_recall, self.review_recall) == (None, None):
            return self
        from ncclean.data.results import recall_threshold

        def reach(recall: float | None) -> float | None:
            return None if recall is None else recall_threshold(clean_prob, recall)

        return replace(self, recall_noisy_below=reach(self.noisy_recall),
                       recall_clean_above=reach(self.review_recall))

    def with_queue(self, clean_prob: np.ndarray, estimate: float | None,
                   interval: tuple[float, float] | None) -> Cut:
        """This cut with ``queue_clean_above`` filled in from the run's ``clean_prob``
        (``(n,)``, every scored pair) and the method's noise ``estimate`` with its 95%
        ``interval``; every other field kept.

        Where the pairs under ``clean_above`` outnumber ``estimate * n``, the thresholds flag
        more than the corpus holds: the review queue becomes the ``round(interval[0] * n)``
        lowest pairs (pairs with equal scores on one side), ``queue_clean_above`` the clean
        threshold that makes it, and the recall bands do not widen it. The interval's lower end,
        not the estimate: the estimate errs high by the clean pairs that score like shuffled
        ones, on small corpora by as much as the interval is wide, on large ones by about a
        point (``benchmarks/results/review-queue.md``). Where they do not outnumber it (noise
        hidden among near misses, a clean corpus) nothing changes and the bands widen the
        queue as before. Without an interval, or without ``queue_by_estimate``, nothing
        changes."""
        if not self.queue_by_estimate or estimate is None or interval is None:
            return replace(self, queue_clean_above=None)
        import numpy as np

        from ncclean.data.results import as_written

        values = np.asarray(clean_prob, dtype=np.float64)
        values = np.sort(as_written(np.clip(values[np.isfinite(values)], 0.0, 1.0)))
        flagged = int(np.searchsorted(values, np.float32(self.clean_above), side="left"))
        if len(values) == 0 or flagged <= estimate * len(values):
            return replace(self, queue_clean_above=None)
        queued = min(int(round(interval[0] * len(values))), flagged)
        return replace(self, queue_clean_above=float(values[queued]) if queued < len(values)
                       else self.clean_above)

    def thresholds(self) -> tuple[float, float]:
        """``(clean_above, noisy_below)`` in force: the given thresholds, raised to the recall
        bands' where :meth:`with_recall` filled those in (clean never below noisy); where
        :meth:`with_queue` cut the queue back, clean from ``queue_clean_above`` and noisy
        below the lower of it and the noisy threshold."""
        noisy_below = max(self.noisy_below, self.recall_noisy_below or 0.0)
        if self.queue_clean_above is not None:
            return self.queue_clean_above, min(noisy_below, self.queue_clean_above)
        clean_above = max(self.clean_above, self.recall_clean_above or 0.0, noisy_below)
        return clean_above, noisy_below

    def describe_bands(self) -> str:
        """What the recall bands (or the noise estimate) of this resolved cut did, in words."""
        if self.queue_clean_above is not None:
            return "queue cut back to the lower end of the noise estimate's interval"
        held = f"{self.noisy_recall or '-'} / {self.review_recall or '-'}"
        if self.thresholds() == (self.clean_above, self.noisy_below):
            return f"recall bands {held}: no wider"
        return f"widened so noisy / noisy and vague hold {held} of the expected noise"

    def record(self, requested: Cut, by_method: bool) -> dict[str, Any]:
        """The sidecar's ``cut``: this (resolved) cut's fields, where its noise rate came from
        (``requested``'s), and whether the method drew the partitions itself."""
        source = "auto" if requested.auto else ("given" if requested.noise_rate is not None
                                                else None)
        ignored = {"clean_above": None, "noisy_below": None} if self.noise_rate is not None \
            else {}  # a noise-rate cut uses no threshold: none is recorded
        return as_record(self) | ignored | {"noise_rate_source": source,
                                  "by": "method" if by_method else "cut"}


_UNSET = ((0.5, 0.5), (0.8, 0.5))  # Cut()'s and DEFAULT_CUT's thresholds: not asked for
_DEFAULT_RECALL = (0.5, 0.9)  # DEFAULT_CUT's recall bands
DEFAULT_CUT = Cut(clean_above=0.8, noisy_below=0.5, noisy_recall=_DEFAULT_RECALL[0],
                  review_recall=_DEFAULT_RECALL[1], queue_by_estimate=True)

#: What a scored file is for (``score --preset``): the cut ``score`` uses, and what ``retrain``
#: trains on unless ``--keep`` says otherwise. ``review``: calibrated thresholds widened by the
#: recall bands, vague pairs to look at (the default cut; benchmarks/results/natural-noise.md,
#: "Recall bands"). ``gate``: the noisy partition is the method's estimated share,
#: so ``check --max-noisy`` bounds the estimated noise rate. ``train``: rare captions clean from
#: 0.3 and retraining on ``clean_significant``, the best training set measured (117% of the
#: noisy-to-oracle gap at 50% noise with clip on pretrained towers, benchmarks/results/retrain.md).
PRESETS: dict[str, dict] = {
    "review": {"cut": {}, "keep": "clean"},
    "gate": {"cut": {"noise_rate": "auto"}, "keep": "clean"},
    "train": {"cut": {"rare_clean_above": 0.3, "noisy_recall": None, "review_recall": None},
              "keep": "significant"},
}


def preset_cut(name: str, rare_count: int = 2) -> Cut:
    """The :class:`Cut` of preset ``name`` (:data:`PRESETS`); :class:`BadOptionError` for an
    unknown name."""
    if name not in PRESETS:
        raise BadOptionError(f"--preset must be one of {', '.join(PRESETS)}, got {name!r}")
    return replace(DEFAULT_CUT, rare_count=rare_count, preset=name, **PRESETS[name]["cut"])


def preset_keep(record: dict) -> str:
    """What ``retrain`` trains on by default for a scored file with run ``record``: its
    preset's ``keep``, else ``clean``."""
    preset = ((record.get("options") or {}).get("cut") or {}).get("preset")
    return PRESETS.get(preset, PRESETS["review"])["keep"]
"""``score``'s cut: noisy below 0.5, clean from 0.8, vague between."""


@dataclass(frozen=True)
class StageOptions:
    """The stages after the method (:mod:`ncclean.stages.run`). ``significance``: how clean pairs
    split into significant and insignificant, ``specificity``, ``update`` (averaging
    ``significance_passes`` shuffled passes) or ``off``; ``None``: the method's choice, else
    ``specificity``. ``pseudo_captions``: suggest a clean caption for every noisy pair."""

    significance: str | None = None
    significance_passes: int = 3
    pseudo_captions: bool = True

    def __post_init__(self) -> None:
        if self.significance is not None and self.significance not in SIGNIFICANCE:
            raise BadOptionError(f"--significance must be one of specificity, update or off, "
                                 f"got {self.significance!r}")
        _at_least("--significance-passes", self.significance_passes, 1)


@dataclass(frozen=True)
class RunOptions:
    """How the run is carried out. ``seed``: the same seed writes the same bytes; ``device``:
    ``auto``, ``cpu`` or ``cuda``; ``cache_dir``: ``True`` for the default cache, ``None`` or
    ``False`` for none; ``checkpoint_dir`` with ``resume``: save (and continue) the training
    state every epoch; ``strict``: fail on invalid rows; ``max_image_pixels``: larger images are
    invalid (``None``: 89,478,485); ``save_matcher``: where to save the trained matcher;
    ``write``: what the output holds, ``all`` (every input column, then ncclean's) or ``scores``
    (the id column, then ncclean's: joinable on the id, :mod:`ncclean.data.results`);
    ``overwrite``: replace an output file that ncclean did not write (refused otherwise)."""

    seed: int = 0
    device: str = "auto"
    cache_dir: PathLike | bool | None = True
    checkpoint_dir: PathLike | None = None
    resume: bool = False
    strict: bool = False
    max_image_pixels: int | None = None
    save_matcher: PathLike | None = None
    write: Literal["all", "scores"] = "all"
    overwrite: bool = False

    def __post_init__(self) -> None:
        _at_least("--seed", self.seed, 0)
        if self.write not in WRITES:
            raise BadOptionError(f"--write must be all or scores, got {self.write!r}")
        if self.max_image_pixels is not None:
            _at_least("--max-image-pixels", self.max_image_pixels, 1)


GROUPS: dict[str, type] = {"matcher": MatcherOptions, "cut": Cut, "stages": StageOptions,
                           "run": RunOptions}
_OWNER = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}


#: The column keywords every API function takes (``caption_col="text"``), and the field of
#: :class:`ncclean.data.schema.Columns` each names.
COLUMN_KEYWORDS = {"caption_col": "caption", "image_col": "image", "id_col": "id",
                   "image_id_col": "image_id", "image_emb_col": "image_emb",
                   "text_emb_col": "text_emb", "allow_absolute_paths": "allow_absolute_paths"}


def fold_keywords(groups: dict[str, Any], keywords: dict[str, Any], command: str = "score"
                  ) -> dict[str, Any]:
    """``groups`` (group name -> options object) with loose keywords such as ``seed=3`` or
    ``clean_above=0.5`` moved into the group that owns each, every group checked once: the
    keyword form of ``api.score`` before the option objects. An unknown keyword is a
    ``TypeError``, as Python's own."""
    moved: dict[str, dict[str, Any]] = {}
    for name, value in keywords.items():
        if name in COLUMN_KEYWORDS and "columns" in groups:  # caption_col=... as split takes it
            moved.setdefault("columns", {})[COLUMN_KEYWORDS[name]] = value
            continue
        if name not in _OWNER:
            raise TypeError(f"{command}() got an unexpected keyword argument {name!r}")
        moved.setdefault(_OWNER[name], {})[name] = value
    return {group: replace(value, **moved[group]) if group in moved else value
            for group, value in groups.items()}


def options_record(**groups: Any) -> dict[str, dict]:
    """Every field of every options object given (``matcher=..., cut=...``), as the sidecar's
    ``options``."""
    return {name: as_record(value) for name, value in groups.items()}


ENGINES = ("local", "ray")


AUTO_FIT_SAMPLE = 250_000
"""``--fit-sample auto``: a corpus of two vector columns (and an id column) with more pairs than
this is fitted on a sample of this many and applied part by part (memory bounded by the sample,
not by the corpus: benchmarks/results/speed.md); smaller corpora get the one pass."""


@dataclass(frozen=True)
class ScaleOptions:
    """Scoring beyond one pass (:mod:`ncclean.pipeline.sharded`): ``fit_sample``: fit on every
    pair up to this many and a deterministic sample (by a hash of the pair id) beyond; ``"all"``:
    every pair; ``"auto"`` (the default): :data:`AUTO_FIT_SAMPLE` for a corpus of vector columns
    larger than that, every pair otherwise (:func:`ncclean.pipeline.sharded.resolve_scale`);
    ``save_fit``: write the fit there; ``fit``: apply this saved fit, no training; ``engine``:
    ``local`` (shard by shard in this process) or ``ray`` (Ray Data, on ``ray_address`` or a
    local cluster). The default, all unset, is the one pass for any corpus it fits."""

    fit_sample: int | Literal["auto", "all"] = "auto"
    save_fit: PathLike | None = None
    fit: PathLike | None = None
    engine: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.fit_sample, str):
            if self.fit_sample not in ("auto", "all"):
                raise BadOptionError("--fit-sample must be a number of pairs, auto or all, got "
                                     f"{self.fit_sample!r}")
        else:
            _at_least("--fit-sample", self.fit_sample, 2)
        if self.engine not in ENGINES:
            raise BadOptionError(f"--engine must be one of {', '.join(ENGINES)}, got "
                                 f"{self.engine!r}")
        if self.fit is not None and (self.save_fit is not None
                                     or not isinstance(self.fit_sample, str)):
            raise BadOptionError("--fit applies a saved fit; it does not combine with "
                                 "--save-fit or --fit-sample")

    @property
    def sample_size(self) -> int | None:
        """The fit sample's size, ``None`` for every pair."""
        return None if isinstance(self.fit_sample, str) else self.fit_sample

    @property
    def asked(self) -> bool:
        """Whether anything beyond the one pass was asked for (``--fit-sample all`` alone is the
        one pass)."""
        return replace(self, fit_sample="auto") != ScaleOptions() or \
            self.sample_size is not None


AUTO_METHOD = "auto"
"""The method name that lets the corpus choose (``--method auto``, the default)."""


@dataclass(frozen=True)
class ScoreRequest:
    """One ``score`` run as asked: built once from the options (:func:`ncclean.api.score`) and
    carried whole through the pipeline, which reads what it needs from it; the run record's
    ``options`` are written from it (:meth:`options`). ``device`` is ``run.device`` resolved;
    ``given``: the options named on the command line (a saved fit refuses one it fixes)."""

    input: Any
    output: Any
    method: str
    params: dict | None
    columns: Any  # ncclean.data.schema.Columns
    matcher: MatcherOptions
    cut: Cut
    stages: StageOptions
    run: RunOptions
    scale: ScaleOptions
    device: str
    given: frozenset[str] = frozenset()
    started: str = ""
    argv: tuple[str, ...] = ()

    def provenance(self, files: list, root) -> dict:
        """The run record's provenance: ``started`` (UTC, ISO 8601), ``argv`` (the command
        line), ``input_sha256`` (a fingerprint of ``files``, the input's, under ``root``) and
        ``versions`` (ncclean's and its main dependencies')."""
        from pathlib import Path

        from ncclean.provenance import MAIN_PACKAGES, input_sha256, versions

        return {"started": self.started, "argv": list(self.argv),
                "input_sha256": input_sha256([Path(f) for f in files if Path(f).is_file()],
                                             Path(root)),
                "versions": versions(*MAIN_PACKAGES)}

    def options(self) -> dict[str, dict]:
        """Every option group, field by field, as the run record's ``options``."""
        return options_record(columns=self.columns, matcher=self.matcher, cut=self.cut,
                              stages=self.stages, run=self.run, scale=self.scale)

    def but(self, **changes: Any) -> ScoreRequest:
        """This request with ``changes`` (a resolved method, the sample's input)."""
        return replace(self, **changes)

