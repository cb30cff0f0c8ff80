"""What the command line and Python users call: one function per command.

Each function checks its options, calls one function of :mod:`ncclean.pipeline` (or of the
library layer that does the work), and returns that function's summary; it never prints. Outputs
are written atomically. Errors a user can act on are :class:`ncclean.errors.NcCleanError`.

Every function that reads a corpus or a scored file takes a path or a table in memory (a pyarrow
``Table``, a pandas or polars ``DataFrame``, a ``datasets.Dataset``) and the column keywords of
:func:`score` (``caption_col=``, ``image_col=``, ``id_col=``, ...; one set serves every call).
``progress=``: a :class:`~ncclean.progress.Progress` callback, or ``False``; by default a line
per stage in a Jupyter notebook and nothing elsewhere.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ncclean.data.schema import Columns
from ncclean.options import DEFAULT_CUT, Cut, MatcherOptions, RunOptions, ScaleOptions, StageOptions
from ncclean.progress import Progress

if TYPE_CHECKING:
    from ncclean.evaluate.retrain import RetrainSummary
    from ncclean.pipeline.corpus import CorpusSummary, NoiseSummary, SynthSummary
    from ncclean.pipeline.score import ScoreSummary
    from ncclean.pipeline.split import SplitSummary
    from ncclean.report.gate import CheckResult

PathLike = str | os.PathLike
Table = Any  # a table in memory: ncclean.pipeline.frames
Shown = Progress | bool | None  # progress=: ncclean.progress.chosen_progress


_CONSTANTS = {"PARTITIONS": "ncclean.data.results", "INVALID": "ncclean.data.results",
              "NOISY": "ncclean.data.results"}
_SUMMARIES = {"SynthSummary": "ncclean.pipeline.corpus", "NoiseSummary": "ncclean.pipeline.corpus",
              "CorpusSummary": "ncclean.pipeline.corpus", "ScoreSummary": "ncclean.pipeline.score",
              "SplitSummary": "ncclean.pipeline.split", "CheckResult": "ncclean.report.gate",
              "RetrainSummary": "ncclean.evaluate.retrain"}

__all__ = [
    "CheckResult", "Columns", "CorpusSummary", "Cut", "MatcherOptions", "NoiseSummary",
    "RetrainSummary", "RunOptions", "ScoreSummary", "SplitSummary", "StageOptions",
    "SynthSummary", "audit", "check", "detection_metrics", "embed", "fit_positions", "inject_noise",
    "inspect", "methods", "retrain", "score", "split", "synth",
]


def __getattr__(name: str) -> Any:
    """The summary classes, imported when first asked for (importing this module stays light)."""
    if name in _SUMMARIES or name in _CONSTANTS:
        return getattr(importlib.import_module({**_SUMMARIES, **_CONSTANTS}[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def detection_metrics(noisy_gt: Any, clean_prob: Any, flagged: Any = None) -> Any:
    """AUROC, AP and F1 of ``clean_prob`` against the truth ``noisy_gt`` (``flagged``: the pairs
    called noisy, by default ``clean_prob < 0.5``): :mod:`ncclean.evaluate.detection`."""
    from ncclean.evaluate.detection import detection_metrics as metrics

    return metrics(noisy_gt, clean_prob, flagged)


def fit_positions(fit: PathLike, input: PathLike) -> Any:
    """``(positions, meta)``: each row of ``input``'s position among the pairs the saved fit
    trained on (``-1``: applied to it), and the fit's record."""
    from ncclean.pipeline.fit import load_fit, sample_positions

    loaded = load_fit(fit)
    return sample_positions(loaded, input), loaded.meta


def synth(output: PathLike, *, n_images: int = 500, captions_per_image: int = 5,
          lang: str = "en", seed: int = 0) -> SynthSummary:
    """Write the synthetic shapes corpus (see :mod:`ncclean.data.synth`) to ``output``."""
    from ncclean.pipeline.corpus import write_synth

    return write_synth(output, n_images, captions_per_image, lang, seed)


def inject_noise(
    input: PathLike | Table,
    output: PathLike,
    *,
    ratio: float = 0.5,
    protocol: str = "per-caption",
    seed: int = 0,
    index: PathLike | None = None,
    columns: Columns = Columns(),
    move_with_image: Sequence[str] = (),
    overwrite: bool = False,
    progress: Shown = None,
    **column_keywords: Any,
) -> NoiseSummary:
    """Mismatch a share of the pairs of ``input`` and write the result to ``output``.

    Captions stay in their rows; the image side of a row (the image column, ``image_id``, the image
    embedding, ``image_emb`` as ``ncclean embed`` writes it, and the ``move_with_image`` columns)
    is replaced by that of its new image, the pictures with their vectors however the pairs are
    read. Adds ``noisy_gt`` and ``original_image_id`` (and ``image_id`` when the input has none:
    image groups by content). Saves the index as ``<output>.noise.npz`` (re-apply it with
    ``index=``) and a JSON sidecar ``<output>.json``; ``.image_columns`` of the summary lists
    what moved.
    """
    from ncclean.pipeline import corpus
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.progress import chosen_progress

    return on_path(corpus.inject_noise, input, output, ratio=ratio, protocol=protocol, seed=seed,
                   index=index, columns=named_columns(column_keywords, "inject_noise", columns),
                   move_with_image=move_with_image, overwrite=overwrite,
                   progress=chosen_progress(progress))


def describe_noise(estimate: dict) -> str:
    """A noise estimate, ``{"rate": share, "ci95": [low, high] or None}``, in words."""
    from ncclean.report.noise import describe

    return describe(estimate)


def inspect(input: PathLike | Table, columns: Columns = Columns(), *, strict: bool = False,
            decode: bool = True, image_size: int = 64, max_image_pixels: int | None = None,
            progress: Shown = None, **column_keywords: Any) -> CorpusSummary:
    """Read ``input`` as scoring would (decoding every image unless ``decode=False``) and say what
    it holds: sizes, repeated captions, scripts, and every kind of invalid row with examples."""
    from ncclean.pipeline.corpus import inspect_corpus
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.progress import chosen_progress

    return on_path(inspect_corpus, input, named_columns(column_keywords, "inspect", columns),
                   strict=strict, decode=decode, image_size=image_size,
                   max_image_pixels=max_image_pixels, progress=chosen_progress(progress))


def score(
    input: PathLike | Table,
    output: PathLike | None = None,
    method: str = "auto",
    params: dict | None = None,
    *,
    columns: Columns = Columns(),
    matcher: MatcherOptions = MatcherOptions(),
    cut: Cut = DEFAULT_CUT,
    stages: StageOptions = StageOptions(),
    run: RunOptions = RunOptions(),
    scale: ScaleOptions | None = None,
    progress: Shown = None,
    given: frozenset[str] = frozenset(),
    argv: Sequence[str] | None = None,
    **keywords: Any,
) -> ScoreSummary:
    """Score every pair of ``input`` with ``method`` (its parameters ``params``, see ``ncclean
    methods``) and write the output contract to ``output`` (plus ``<output>.json``); ``None``:
    ``<input stem>.scored.parquet`` beside the input, never over a file ``score`` did not write
    (:func:`ncclean.pipeline.score.default_output`); a string ending in ``/``: a folder, one
    output shard per input shard.

    The options come in four groups (:mod:`ncclean.options`): ``matcher``
    (:class:`MatcherOptions`: encoders, sizes, CLIP weights, a loaded matcher), ``cut``
    (:class:`Cut`: thresholds or a noise rate, ``"auto"`` for the method's estimate; a method
    that draws its own partitions, ``sdd``, refuses a cut set otherwise), ``stages``
    (:class:`StageOptions`: significance and pseudo-captions, :mod:`ncclean.stages.run`) and
    ``run``
    (:class:`RunOptions`: seed, device, cache, checkpoints, strictness, and ``write``: ``all``
    input columns or only the id and ncclean's ``scores``). The sidecar records each
    group whole under ``options``, beside what they resolved to (``matcher``, ``cut``,
    ``significance``, ``device``).

    Any field of these groups may also be given as a keyword (``seed=3``, ``clean_above=0.5``,
    ``image_encoder="column"``): it replaces that field of its group.

    ``scale`` (:class:`ScaleOptions`): a fit on a sample (``fit_sample``), saved (``save_fit``)
    or loaded (``fit``), applied shard by shard by an engine (``local`` or ``ray``), output to a
    folder of shards (:mod:`ncclean.pipeline.sharded`, ``docs/scaling.md``). With a saved fit,
    an option it fixes given with another value is an error; ``given`` names options to treat
    as given even at their default (the command line's). ``argv``: the command line the run
    record names (default: the process's).
    """
    from ncclean.options import fold_keywords
    from ncclean.pipeline.run import run_score
    from ncclean.progress import chosen_progress

    if params is not None and not isinstance(params, dict):
        from ncclean.errors import BadOptionError

        raise BadOptionError(f"params must be a dict of the method's parameters, e.g. "
                             f"{{'epochs': 10}}, got {type(params).__name__} {params!r}")
    groups = fold_keywords({"columns": columns, "matcher": matcher, "cut": cut,
                            "stages": stages, "run": run}, keywords)
    return run_score(input, output, method, params, groups, scale, given, argv,
                     chosen_progress(progress))


def embed(
    input: PathLike | Table,
    output: PathLike,
    *,
    encoder: str | None = None,
    caption_col: str = "caption",
    image_col: str = "image",
    half: bool = False,
    layout: str = "parquet",
    image_emb_col: str = "image_emb",
    text_emb_col: str = "text_emb",
    clip_model: str = "ViT-B-32",
    clip_pretrained: str | None = None,
    clip_checkpoint: PathLike | None = None,
    shard_rows: int = 1_000_000,
    device: str = "auto",
    max_image_pixels: int | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    overwrite: bool = False,
    progress: Shown = None,
    **column_keywords: Any,
):
    """Add image and caption vectors to every row of ``input`` (:mod:`ncclean.embed`).
    ``encoder``: ``imagenet+e5`` (the default pipeline's offline towers, both sides in one
    pass; the default unless CLIP weights are given, then ``clip``), ``clip`` (open_clip
    ``clip_model`` with ``clip_pretrained`` or ``clip_checkpoint``), ``e5`` (captions only) or
    ``imagenet`` (images only). ``layout``: ``parquet`` (columns ``image_emb_col`` /
    ``text_emb_col``, float16 with ``half``) or ``clip-retrieval`` (a folder of ``.npy`` shards
    and row-aligned metadata). A corpus of shards (a folder of Parquet files or webdataset
    tars, a tar, a saved dataset) written to a folder (``output`` without ``.parquet``) is
    embedded shard by shard, each to ``output/<shard name>.parquet``, on ``engine`` (``local``
    or ``ray``, at ``ray_address`` or a local cluster), a rerun redoing only what changed.
    Returns an :class:`ncclean.embed.EmbedSummary`.
    """
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.pipeline.vectors import embed_input
    from ncclean.progress import chosen_progress

    named_columns(column_keywords, "embed")  # accepted, as by every function; embed names its own
    return on_path(embed_input, input, output, encoder=encoder, caption_col=caption_col,
                   image_col=image_col, half=half, layout=layout, image_emb_col=image_emb_col,
                   text_emb_col=text_emb_col, clip_model=clip_model,
                   clip_pretrained=clip_pretrained, clip_checkpoint=clip_checkpoint,
                   shard_rows=shard_rows, device=device, max_image_pixels=max_image_pixels,
                   engine=engine, ray_address=ray_address, overwrite=overwrite,
                   progress=chosen_progress(progress))


def split(input: PathLike | Table, out_dir: PathLike | None = None, *,
          html: PathLike | None = None, image_col: str | None = None,
          caption_col: str | None = None, per_partition: int = 40, top: int = 10, seed: int = 0,
          **column_keywords: Any) -> SplitSummary:
    """Split a scored file (or table: ``out_dir`` required) into ``out_dir/<partition>.parquet``
    (every partition, ``invalid`` included) and write ``out_dir/summary.json`` (``None``:
    ``<input stem>.split/`` beside the input); with ``html``, also the HTML report
    (:mod:`ncclean.report.html`). The caption and image columns are the scoring run's unless
    named (a table without its run record: ``caption`` and ``image``). The files' row counts
    are read back and must add up to the input's."""
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.pipeline.split import split_scored

    named_columns(column_keywords, "split")
    return on_path(split_scored, input, out_dir=out_dir, needs="out_dir", html=html,
                   image_col=image_col, caption_col=caption_col, per_partition=per_partition,
                   top=top, seed=seed)


def audit(input: PathLike | Table, *, sample: int | None = None, output: PathLike | None = None,
          labels: PathLike | None = None, seed: int = 0, target_precision: float = 0.95,
          caption_col: str | None = None, image_col: str | None = None, **column_keywords: Any):
    """A labelling sheet of ``sample`` pairs drawn by partition (to ``output``), or each
    partition's precision, the noise rate and a cut estimated from ``labels`` (docs/audit.md),
    of a scored file or table (columns as :func:`split` reads them)."""
    from ncclean.pipeline.audit import audit_scored
    from ncclean.pipeline.frames import named_columns, on_path

    named_columns(column_keywords, "audit")
    return on_path(audit_scored, input, sample=sample, output=output, labels=labels, seed=seed,
                   target=target_precision, caption_col=caption_col, image_col=image_col)


def check(input: PathLike | Table, *, max_noisy: float | None = None,
          max_vague: float | None = None, max_invalid: float | None = None,
          against: PathLike | None = None, max_increase: float = 0.01,
          labels: PathLike | None = None, min_precision: float = 0.9,
          **column_keywords: Any) -> CheckResult:
    """Judge a scored file or table for a data-quality gate (:mod:`ncclean.report.gate`): it
    fails when the noisy (or vague) share of valid pairs, or the invalid share of rows, exceeds
    its bound, or, ``against`` a previous run's summary (a scored file's sidecar, ``split``'s
    ``summary.json`` or ``check --json`` output), when the noisy share grew by more than
    ``max_increase``. With no bound and no ``against``, the bound is ``max_noisy``
    :data:`ncclean.report.gate.DEFAULT_MAX_NOISY` (0.5)."""
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.report.gate import LIMITS, check_scored

    named_columns(column_keywords, "check")
    limits = dict(zip(LIMITS, (max_noisy, max_vague, max_invalid)))
    return on_path(check_scored, input, limits, against, max_increase, labels, min_precision)


def retrain(
    input: PathLike | Table,
    test: PathLike | Table | None = None,
    *,
    keep: str | None = None,
    pseudo_captions: bool = False,
    baseline: bool = False,
    columns: Columns = Columns(),
    steps: int = 1600,
    eval_every: int | None = None,
    schedule: str = "constant",
    seed: int = 0,
    image_encoder: str = "auto",
    text_encoder: str = "auto",
    matcher: PathLike | None = None,
    device: str = "auto",
    cache_dir: PathLike | bool | None = True,
    progress: Shown = None,
    test_columns: dict[str, str | None] | None = None,
    **column_keywords: Any,
) -> RetrainSummary:
    """Train a fresh plain matcher on what the scoring run of ``input`` kept and measure
    Recall@K on ``test`` (:mod:`ncclean.evaluate.retrain`); with ``baseline``, also on every
    valid pair and, when ``input`` has ``noisy_gt``, on the truly clean pairs. The matcher's
    architecture and encoders are the scoring run's (from its sidecar); ``image_encoder`` /
    ``text_encoder`` other than ``auto`` replace a tower (e.g. score with ``e5`` captions and
    retrain the GRU over words on what that run kept); a ``column`` tower reads the embedding
    column the scoring run read unless ``columns`` names another. ``steps``, ``eval_every``
    (``None``: every ``steps // 16``) and ``schedule``: :class:`~ncclean.evaluate.retrain.
    RetrainConfig`, the arms' learning curves. ``matcher``: a saved
    matcher (``score --save-matcher``, the method's own noise-robust training) evaluated
    untrained on ``test`` as one more arm, ``matcher``, with its own share of the gap; how the
    papers judge a method, where the other arms judge its selection. ``keep`` ``None``: what
    the scoring run's preset says (:data:`ncclean.options.PRESETS`), else ``clean``.
    ``test_columns``: the test file's own column names (``caption``, ``image``, ``image_emb``,
    ``text_emb``, ...), the scored file's where not given. ``test=None``: a deterministic
    tenth of the valid pairs with a unique caption is held out of every arm as the test set,
    with a warning in the summary saying what recall on it can and cannot show; a test file
    overlapping the training pairs is a warning too."""
    from ncclean.device import resolve_device
    from ncclean.pipeline.frames import named_columns, on_path
    from ncclean.pipeline.retrain import retrain_config, retrain_scored
    from ncclean.progress import chosen_progress

    return on_path(
        retrain_scored, input, test=test, tables=("test",), keep=keep,
        pseudo_captions=pseudo_captions, baseline=baseline,
        columns=named_columns(column_keywords, "retrain", columns),
        config=retrain_config(keep, steps, eval_every, schedule), seed=seed,
        image_encoder=image_encoder, text_encoder=text_encoder, matcher=matcher,
        device=resolve_device(device), cache_dir=cache_dir, progress=chosen_progress(progress),
        test_columns=test_columns)


# ---------------------------------------------------------------- what the command line needs
# The command line reaches the library only through this module (``make lint`` checks it).


def methods(name: str | None = None) -> list[dict]:
    """Every method (built in and from plugins) in name order, or only ``name``: its summary,
    parameters and departures (:func:`ncclean.methods.base.describe_methods`)."""
    from ncclean.methods.base import describe_methods

    return describe_methods(name)


def method_names() -> list[str]:
    """The names ``--method`` takes besides ``auto`` (loading no method)."""
    from ncclean.methods.base import available_methods

    return [n for n, target in available_methods().items() if not target.startswith("clash")]


def resume_warning(input: PathLike, output: PathLike | None, run: RunOptions,
                   scale: ScaleOptions | None) -> str | None:
    """What ``score`` warns before any work when ``--resume`` has nothing to resume from
    (:func:`ncclean.pipeline.score.resume_warning`)."""
    from ncclean.pipeline.score import resume_warning as warning

    return warning(run, input, output, scale)


def remember_scored(output: PathLike) -> None:
    """Note ``output`` as the last file ``score`` wrote from this folder (best effort)."""
    from ncclean.pipeline.last import remember_scored as remember

    remember(output)


def scored_input(given: PathLike | None, command: str):
    """``(path, note)``: ``given``, or the last file ``score`` wrote from this folder with a
    note saying so (:mod:`ncclean.pipeline.last`)."""
    from ncclean.pipeline.last import scored_input as last

    return last(given, command)


def finish_run(succeeded: bool):
    """End a run: keep the folders it created (``succeeded``) or remove the empty ones; returns
    ``(kept, planned)``: the outputs it completed and how many it planned (an interrupted
    sharded run keeps its complete shards)."""
    from ncclean.data.atomic import finish_run as finish

    return finish(succeeded)


def is_write_error(error: BaseException) -> bool:
    """Whether ``error`` is a full disk or a permission problem, the user's to fix."""
    from ncclean.data.atomic import is_write_error as write_error

    return write_error(error)
