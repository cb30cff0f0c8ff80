"""The options of a scoring run, in four small frozen groups shared by the command line and the
library: the matcher (:class:`MatcherOptions`), the cut (:class:`Cut`, in :mod:`.cut`), the
stages after the method (:class:`StageOptions`) and the run itself (:class:`RunOptions`).

Each group checks its own values when it is built (a bad value is one
:class:`~ncclean.errors.BadOptionError` line), and the scoring run's sidecar records every group
whole (:func:`options_record`), so no option can be left out of the record. Values that depend on
the corpus or the machine (which encoder ``auto`` picks, which device) are resolved later and
recorded beside them.

This module imports neither numpy nor torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from ncclean.errors import BadOptionError
from ncclean.options.cut import DEFAULT_CUT as DEFAULT_CUT
from ncclean.options.cut import PRESETS as PRESETS
from ncclean.options.cut import Cut as Cut
from ncclean.options.cut import _at_least
from ncclean.options.cut import preset_cut as preset_cut
from ncclean.options.cut import preset_keep as preset_keep
from ncclean.records import as_record

PathLike = str | os.PathLike

FINETUNE = ("heads", "full")
SIGNIFICANCE = ("specificity", "update", "off")
DONORS = ("clean", "corpus")  # StageOptions.donors: ncclean.stages.pseudocaption.donor_pool
WRITES = ("all", "scores")


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
class StageOptions:
    """The stages after the method (:mod:`ncclean.stages.run`). ``significance``: how clean pairs
    split into significant and insignificant, ``specificity``, ``update`` (averaging
    ``significance_passes`` shuffled passes) or ``off``; ``None``: the method's choice, else
    ``specificity``. ``pseudo_captions``: suggest a caption for every noisy pair; ``donors``:
    from the clean pairs' captions (``clean``) or every caption of the corpus but the generic
    ones (``corpus``) (:func:`ncclean.stages.pseudocaption.donor_pool`)."""

    significance: str | None = None
    significance_passes: int = 3
    pseudo_captions: bool = True
    donors: str = "clean"

    def __post_init__(self) -> None:
        if self.significance is not None and self.significance not in SIGNIFICANCE:
            raise BadOptionError(f"--significance must be one of specificity, update or off, "
                                 f"got {self.significance!r}")
        _at_least("--significance-passes", self.significance_passes, 1)
        if self.donors not in DONORS:
            raise BadOptionError(f"--donors must be clean or corpus, got {self.donors!r}")


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
    keyword form of ``api.score`` before the option objects. The cut's keywords are given as
    ``score``'s options are (:meth:`Cut.with_options`: a threshold turns the queue by the
    estimate off unless ``queue_by_estimate`` is given too). An unknown keyword is a
    ``TypeError``, as Python's own."""
    moved: dict[str, dict[str, Any]] = {}
    for name, value in keywords.items():
        if name in COLUMN_KEYWORDS and "columns" in groups:  # caption_col=... as split takes it
            moved.setdefault("columns", {})[COLUMN_KEYWORDS[name]] = value
            continue
        if name not in _OWNER:
            raise TypeError(f"{command}() got an unexpected keyword argument {name!r}")
        moved.setdefault(_OWNER[name], {})[name] = value

    def changed(value: Any, changes: dict[str, Any]) -> Any:
        return value.with_options(**changes) if isinstance(value, Cut) \
            else replace(value, **changes)

    return {group: changed(value, moved[group]) if group in moved else value
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
    """How the pipeline fits and applies (:mod:`ncclean.pipeline.sharded`): ``fit_sample``: fit
    on every pair up to this many and a deterministic sample (by a hash of the pair id) beyond;
    ``"all"``: every pair; ``"auto"`` (the default): :data:`AUTO_FIT_SAMPLE` for a corpus of
    vector columns larger than that, every pair otherwise
    (:func:`ncclean.pipeline.route.resolve_scale`);
    ``save_fit``: write the fit there; ``fit``: apply this saved fit, no training; ``engine``:
    ``local`` (shard by shard in this process) or ``ray`` (Ray Data, on ``ray_address`` or a
    local cluster). The default, all unset, fits every pair of any corpus up to that size."""

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
    ``given``: the options named on the command line (a saved fit refuses one it fixes);
    ``corpus_pairs``: when ``input`` is the fit sample of a larger corpus, the corpus's pairs
    (the stages share their search budget among them)."""

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
    corpus_pairs: int | None = None

    def provenance(self, files: list, root, fingerprint=None) -> dict:
        """The run record's provenance: ``started`` (UTC, ISO 8601), ``argv`` (the command
        line), ``input_sha256`` (a fingerprint of ``files``, the input's, under ``root``; or
        ``fingerprint()``, when it was started earlier,
        :func:`ncclean.provenance.input_sha256_soon`) and ``versions`` (ncclean's and its main
        dependencies')."""
        from pathlib import Path

        from ncclean.provenance import MAIN_PACKAGES, input_sha256, versions

        digest = fingerprint() if fingerprint is not None else input_sha256(
            [Path(f) for f in files if Path(f).is_file()], Path(root))
        return {"started": self.started, "argv": list(self.argv), "input_sha256": digest,
                "versions": versions(*MAIN_PACKAGES)}

    def options(self) -> dict[str, dict]:
        """Every option group, field by field, as the run record's ``options``."""
        return options_record(columns=self.columns, matcher=self.matcher, cut=self.cut,
                              stages=self.stages, run=self.run, scale=self.scale)

    def but(self, **changes: Any) -> ScoreRequest:
        """This request with ``changes`` (a resolved method, the sample's input)."""
        return replace(self, **changes)

