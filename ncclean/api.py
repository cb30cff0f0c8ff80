"""What the command line and Python users call: one function per command.

Each function takes paths and plain options, does the work through the library modules, writes
its outputs atomically and returns a small summary dataclass; it never prints. Errors a user can
act on are :class:`ncclean.errors.NcCleanError`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ncclean.data.schema import Columns
from ncclean.device import resolve_device
from ncclean.progress import Progress, no_progress

PathLike = str | os.PathLike


def _as_dict(summary) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(summary).items()}


# ------------------------------------------------------------------------------------------ synth


@dataclass(frozen=True)
class SynthSummary:
    output: Path
    n_pairs: int
    n_images: int
    lang: str
    seed: int

    def as_dict(self) -> dict:
        return _as_dict(self)


def synth(output: PathLike, *, n_images: int = 500, captions_per_image: int = 5,
          lang: str = "en", seed: int = 0) -> SynthSummary:
    """Write the synthetic shapes corpus (see :mod:`ncclean.data.synth`) to ``output``."""
    from ncclean.data.parquet import check_output_path, write_table
    from ncclean.data.synth import synth_table

    out = check_output_path(output)
    table = synth_table(n_images, captions_per_image, lang, seed)  # type: ignore[arg-type]
    write_table(out, table)
    return SynthSummary(out, table.num_rows, n_images, lang, seed)


# ----------------------------------------------------------------------------------- inject-noise


@dataclass(frozen=True)
class NoiseSummary:
    """What :func:`inject_noise` did.

    ``requested``: ``floor(ratio * n)`` in the protocol's ``unit`` (captions or images);
    ``moved``: captions now on another image; ``noisy``: of those, the ones whose text differs
    from every caption of the new image (the ``noisy_gt`` column). ``protocol`` is ``"index"``
    when a saved index was applied.
    """

    input: Path
    output: Path
    index_file: Path
    protocol: str
    ratio: float
    seed: int
    applied_index: Path | None
    n_pairs: int
    n_images: int
    unit: str
    requested: int
    moved: int
    noisy: int

    @property
    def realised_ratio(self) -> float:
        return self.noisy / self.n_pairs

    def as_dict(self) -> dict:
        return _as_dict(self) | {"realised_ratio": self.realised_ratio}


def inject_noise(
    input: PathLike,
    output: PathLike,
    *,
    ratio: float = 0.5,
    protocol: str = "per-caption",
    seed: int = 0,
    index: PathLike | None = None,
    columns: Columns = Columns(),
    move_with_image: Sequence[str] = (),
    progress: Progress = no_progress,
) -> NoiseSummary:
    """Mismatch a share of the pairs of ``input`` and write the result to ``output``.

    Captions stay in their rows; the image side of a row (the image column, ``image_id``, the image
    embedding and the ``move_with_image`` columns) is replaced by that of its new image. Adds
    ``noisy_gt`` and ``original_image_id`` (and ``image_id`` when the input has none: image groups
    by content). Saves the index as ``<output>.noise.npy`` (re-apply it with ``index=``) and a JSON
    sidecar ``<output>.json``.
    """
    import numpy as np
    import pyarrow as pa

    from ncclean.data.corpus import read_corpus
    from ncclean.data.noise import apply_index, image_rows, noisy_ground_truth, sample_noise
    from ncclean.data.parquet import (
        atomic_path,
        check_output_path,
        sidecar_path,
        write_json,
        write_pairs,
    )
    from ncclean.data.schema import IMAGE_ID, NOISY_GT, ORIGINAL_IMAGE_ID
    from ncclean.errors import IndexFileError, SchemaError
    from ncclean.provenance import versions

    corpus = read_corpus(input, columns, progress=progress)
    source, resolved = corpus.source, corpus.columns
    out = check_output_path(output, source)
    missing = [c for c in move_with_image if c not in source.schema.names]
    if missing:
        raise SchemaError(f"--move-with-image: no column {', '.join(map(repr, missing))}; "
                          f"available columns: {', '.join(source.schema.names)}")

    if index is not None:
        try:
            saved = np.load(index, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise IndexFileError(f"cannot read noise index {index}: {error}") from None
        caption_to_image = apply_index(saved, corpus.image_group)
    else:
        caption_to_image = sample_noise(corpus.image_group, ratio, protocol,  # type: ignore[arg-type]
                                        seed)
    noisy = noisy_ground_truth(caption_to_image, corpus.image_group, corpus.text_group)
    moved = caption_to_image != corpus.image_group
    if index is not None:
        protocol, unit, requested = "index", "captions", int(moved.sum())
    elif protocol == "per-image":
        unit, requested = "images", int(ratio * corpus.n_images)
    else:
        unit, requested = "captions", int(ratio * corpus.n_pairs)

    image_columns = list(dict.fromkeys([*resolved.image_side, *move_with_image]))
    rows = image_rows(caption_to_image, corpus.image_group)
    taken = source.read_columns(image_columns).take(pa.array(rows))
    updates: dict[str, pa.Array | pa.ChunkedArray] = {c: taken.column(c) for c in image_columns}
    if resolved.image_id:
        updates[ORIGINAL_IMAGE_ID] = source.read_columns([resolved.image_id]).column(0)
    else:
        updates[IMAGE_ID] = pa.array(caption_to_image)
        updates[ORIGINAL_IMAGE_ID] = pa.array(corpus.image_group)
    updates[NOISY_GT] = pa.array(noisy)

    write_pairs(source, out, updates)
    index_file = out.with_name(out.name + ".noise.npy")
    with atomic_path(index_file) as tmp, open(tmp, "wb") as handle:
        np.save(handle, caption_to_image)
    summary = NoiseSummary(
        input=Path(input), output=out, index_file=index_file, protocol=protocol, ratio=ratio,
        seed=seed, applied_index=Path(index) if index is not None else None,
        n_pairs=corpus.n_pairs, n_images=corpus.n_images, unit=unit, requested=requested,
        moved=int(moved.sum()), noisy=int(noisy.sum()),
    )
    write_json(sidecar_path(out),
               {"command": "inject-noise", **summary.as_dict(),
                "versions": versions("numpy", "pyarrow")})
    return summary


# ---------------------------------------------------------------------------------------- inspect


@dataclass(frozen=True)
class CorpusSummary:
    """What a corpus holds and which rows cannot be used."""

    input: Path
    n_pairs: int
    n_images: int
    n_unique_captions: int
    columns: dict[str, str | None]
    invalid: dict[str, int]
    invalid_examples: list[tuple[int, str, str]]
    top_captions: list[tuple[str, int]]
    cjk_captions: int
    n_invalid: int
    images_decoded: bool

    def as_dict(self) -> dict:
        return _as_dict(self)


def inspect(input: PathLike, columns: Columns = Columns(), *, strict: bool = False,
            decode: bool = True, image_size: int = 64,
            max_image_pixels: int | None = None,
            progress: Progress = no_progress) -> CorpusSummary:
    """Read ``input`` as scoring would (decoding every image unless ``decode=False``) and say what
    it holds: sizes, repeated captions, scripts, and every kind of invalid row with examples."""
    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.text import _CJK

    corpus = read_corpus(input, columns, strict=strict,
                         image_size=image_size if decode else None,
                         max_image_pixels=max_image_pixels or DEFAULT_MAX_PIXELS,
                         progress=progress)
    counts = Counter(corpus.captions)
    examples = [(row, str(corpus.ids[row].as_py()), reason)
                for row, reason in enumerate(corpus.reasons) if reason is not None][:5]
    cjk = re.compile(f"[{_CJK}]")
    return CorpusSummary(
        input=Path(input),
        n_pairs=corpus.n_pairs,
        n_images=corpus.n_images,
        n_unique_captions=len(counts),
        columns=asdict(corpus.columns),
        invalid=corpus.invalid_counts(),
        n_invalid=corpus.n_invalid,
        invalid_examples=examples,
        top_captions=[(text, n) for text, n in counts.most_common(5) if n > 1],
        cjk_captions=sum(1 for text in corpus.captions if cjk.search(text)),
        images_decoded=decode and corpus.columns.image is not None,
    )


# ------------------------------------------------------------------------------------------ score


@dataclass(frozen=True)
class ScoreSummary:
    """What :func:`score` did: where the output is, its partition counts, the estimated noise
    rate, how well injected noise was found (when the input has ``noisy_gt``), and how long each
    phase took (seconds)."""

    input: Path
    output: Path
    method: str
    device: str
    n_pairs: int
    n_invalid: int
    partition_counts: dict[str, int]
    noise_rate: float | None
    seconds: dict[str, float]
    detection: dict[str, float] | None = None
    n_pseudo_captions: int = 0

    def as_dict(self) -> dict:
        return _as_dict(self)


def embed(
    input: PathLike,
    output: PathLike,
    *,
    encoder: str = "clip",
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
    progress: Progress = no_progress,
):
    """Add image and caption vectors to every row of ``input`` (:mod:`ncclean.embed`):
    ``encoder`` ``clip`` (open_clip ``clip_model`` with ``clip_pretrained`` or
    ``clip_checkpoint``) or ``e5`` (captions only); ``layout`` ``parquet`` (columns
    ``image_emb_col`` / ``text_emb_col``, float16 with ``half``) or ``clip-retrieval`` (a folder
    of ``.npy`` shards and row-aligned metadata). Returns an :class:`ncclean.embed.EmbedSummary`.
    """
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.parquet import open_pairs
    from ncclean.data.schema import resolve_columns
    from ncclean.embed import embed_pairs
    from ncclean.errors import BadOptionError

    if shard_rows < 1:
        raise BadOptionError(f"--shard-rows must be at least 1, got {shard_rows}")
    if image_emb_col == text_emb_col:
        raise BadOptionError("the image and text embedding columns need different names")
    spec = None
    if encoder == "clip":
        from ncclean.models.openclip import ClipSpec

        spec = ClipSpec(clip_model, clip_pretrained,
                        str(clip_checkpoint) if clip_checkpoint else None).check()
    source = open_pairs(input)
    resolved = resolve_columns(Columns(caption=caption_col, image=image_col), source.schema,
                               need_image=encoder == "clip")
    return embed_pairs(source, resolved, Path(output), encoder=encoder, clip_spec=spec,
                       half=half, layout=layout, image_col=image_emb_col,
                       text_col=text_emb_col, shard_rows=shard_rows,
                       device=resolve_device(device),
                       max_pixels=max_image_pixels or DEFAULT_MAX_PIXELS, progress=progress)


def _scatter(values, rows, n: int, fill=float("nan")):
    """``values`` of the scored pairs placed at their ``rows`` in an ``(n,)`` array."""
    import numpy as np

    values = np.asarray(values)
    if values.dtype == object:
        out = np.full(n, fill, dtype=object)
    elif np.issubdtype(values.dtype, np.floating):
        out = np.full(n, np.nan)
    else:
        out = np.zeros(n, dtype=values.dtype)
    out[rows] = values
    return out


def score(
    input: PathLike,
    output: PathLike,
    *,
    method: str = "gmm",
    params: dict | None = None,
    columns: Columns = Columns(),
    image_encoder: str = "auto",
    text_encoder: str = "auto",
    embed_dim: int = 256,
    image_size: int = 64,
    seed: int = 0,
    device: str = "auto",
    clean_above: float = 0.8,
    noisy_below: float = 0.5,
    noise_rate: float | str | None = None,
    rare_clean_above: float | None = None,
    rare_count: int = 2,
    significance: str | None = None,
    significance_passes: int = 3,
    pseudo_captions: bool = True,
    load_matcher: PathLike | None = None,
    save_matcher: PathLike | None = None,
    checkpoint_dir: PathLike | None = None,
    resume: bool = False,
    cache_dir: PathLike | None | bool = True,
    strict: bool = False,
    max_image_pixels: int | None = None,
    clip_model: str | None = None,
    clip_pretrained: str | None = None,
    clip_checkpoint: PathLike | None = None,
    finetune: str = "heads",
    progress: Progress = no_progress,
) -> ScoreSummary:
    """Score every pair of ``input`` with ``method`` and write the output contract to
    ``output`` (plus ``<output>.json``).

    Encoders: ``image_encoder`` ``pixels`` (a CNN trained on the decoded images) or ``column``
    (``columns.image_emb``); ``text_encoder`` ``tokens`` (a GRU over words), ``e5`` (frozen
    multilingual-e5-small) or ``column`` (``columns.text_emb``); either may be ``clip``, heads on
    the frozen features of the open_clip model ``clip_model`` (default ViT-B-32) with weights
    ``clip_pretrained`` (a tag, downloaded) or ``clip_checkpoint`` (a file). ``auto`` picks
    ``column`` when the embedding column is named, else ``clip`` when CLIP weights are given.
    ``finetune="full"`` trains the whole CLIP instead of heads (meant for a GPU). A loaded
    matcher brings its own encoders.

    Partitions: ``clean_prob < noisy_below`` is noisy, ``>= clean_above`` clean, the band between
    vague; ``rare_clean_above`` lowers the clean threshold of pairs whose caption occurs at most
    ``rare_count`` times (:mod:`ncclean.stages.partition`: a cut for training sets); or
    ``noise_rate`` (a share, or ``"auto"`` for the method's estimate) marks the lowest
    share noisy; a method that draws its own partitions (``sdd``) keeps them. Clean pairs are then
    split by ``significance`` (``specificity``, ``update`` with ``significance_passes``, or
    ``off``: see :mod:`ncclean.stages.significance`; ``None``: the method's choice, else
    ``specificity``), and noisy pairs
    get pseudo-captions unless ``pseudo_captions=False``. ``cache_dir=True`` uses the default
    cache; ``None``/``False`` disables it.
    """
    import time

    import numpy as np

    from ncclean.data.cache import default_cache_dir
    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.parquet import check_output_path
    from ncclean.errors import BadOptionError
    from ncclean.methods.base import Context, make_method
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.resolve import matcher_config
    from ncclean.stages.partition import Cut, caption_counts, partition
    from ncclean.stages.significance import MODES

    seconds: dict[str, float] = {}
    began = time.perf_counter()
    device = resolve_device(device)
    chosen = make_method(method, params)
    if save_matcher is not None and not getattr(chosen, "saves_matcher", True):
        raise BadOptionError(f"--save-matcher: the checkpoint format cannot hold {method}'s "
                             "matcher yet (it adds heads to a plain matcher); score without it")
    if isinstance(noise_rate, str) and noise_rate != "auto":
        raise BadOptionError(f"--noise-rate must be a number in [0, 1] or auto, got {noise_rate!r}")
    if significance is not None and significance not in (*MODES, "off"):
        raise BadOptionError(f"--significance must be one of {', '.join(MODES)} or off, got "
                             f"{significance!r}")
    if rare_clean_above is not None and noise_rate == "auto":
        raise BadOptionError("--rare-clean-above lowers a threshold; it does not combine with "
                             "--noise-rate")
    cut = Cut(clean_above, noisy_below, None if noise_rate in (None, "auto") else
              float(noise_rate), rare_clean_above, rare_count)
    cache = default_cache_dir() if cache_dir is True else (Path(cache_dir) if cache_dir else None)
    config, initial = matcher_config(
        columns, image_encoder, text_encoder, embed_dim, image_size, load_matcher, device,
        {"model": clip_model, "pretrained": clip_pretrained, "checkpoint": clip_checkpoint,
         "finetune": finetune})
    max_pixels = max_image_pixels or DEFAULT_MAX_PIXELS

    corpus = read_corpus(
        input, columns, strict=strict,
        image_size=config.image_size if config.image_tower == "pixels" else None,
        max_image_pixels=max_pixels, cache_dir=cache, progress=progress)
    out = check_output_path(output, corpus.source)  # fail now, not after training
    if corpus.valid.sum() < 2:
        raise BadOptionError(f"{input}: only {int(corpus.valid.sum())} usable pairs; scoring "
                             "needs at least 2 (see invalid_reason with ncclean inspect)")
    complete_config(config, corpus)
    features = build_features(corpus, config, cache_dir=cache, device=device,
                              max_pixels=max_pixels, progress=progress)
    if features.n_pairs < 2:
        raise BadOptionError(f"{input}: only {features.n_pairs} usable pairs; scoring needs at "
                             "least 2 (see invalid_reason with ncclean inspect)")
    seconds["read"] = time.perf_counter() - began

    fitted = time.perf_counter()
    result = chosen.fit(features, Context(
        seed=seed, device=device, progress=progress, matcher_config=config, initial=initial,
        checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None, resume=resume))
    seconds["method"] = time.perf_counter() - fitted
    clean_prob = np.asarray(result.clean_prob, dtype=np.float64)
    if clean_prob.shape != (features.n_pairs,):
        raise ValueError(f"method {method!r} returned {clean_prob.shape} scores for "
                         f"{features.n_pairs} pairs")
    if noise_rate == "auto":
        if result.noise_rate is None:
            raise BadOptionError(f"--noise-rate auto: method {method!r} gives no estimate")
        cut = Cut(clean_above, noisy_below, float(result.noise_rate))

    staged = time.perf_counter()
    counts = caption_counts(features.text_group)
    parts = partition(clean_prob, cut, counts) \
        if result.partition is None else np.asarray(result.partition, dtype=object).copy()
    if significance is None:
        significance = result.significance or "specificity"
    stages = _run_stages(result, features, clean_prob, parts, significance,
                         significance_passes, pseudo_captions, seed, device, progress,
                         rare=counts <= cut.rare_count)
    seconds["stages"] = time.perf_counter() - staged
    return _write_scored(
        corpus, features, out, result, clean_prob, parts, stages, seconds, began,
        sidecar={"command": "score", "input": str(input), "method": method,
                 "params": chosen.params(), "seed": seed, "device": device,
                 "columns": {"image_emb": corpus.columns.image_emb,
                             "text_emb": corpus.columns.text_emb},
                 "matcher": {k: v for k, v in config.to_dict().items() if k != "vocab"}
                 | {"vocab_size": len(config.vocab) if config.vocab else None,
                    "loaded_from": str(load_matcher) if load_matcher else None},
                 "cut": {"clean_above": cut.clean_above, "noisy_below": cut.noisy_below,
                         "noise_rate": cut.noise_rate,
                         "noise_rate_source": "auto" if noise_rate == "auto" else
                         ("given" if noise_rate is not None else None),
                         "rare_clean_above": cut.rare_clean_above,
                         "rare_count": cut.rare_count if cut.rare_clean_above is not None
                         else None,
                         "by": "method" if result.partition is not None else "cut"},
                 "significance": significance},
        save_matcher=save_matcher)


@dataclass
class _Stages:
    significance: object = None
    donor: object = None
    donor_score: object = None
    report: dict | None = None


def _run_stages(result, features, clean_prob, parts, significance: str, passes: int,
                pseudo: bool, seed: int, device: str, progress: Progress,
                rare) -> _Stages:
    """Significance (splits the clean partition, in place) and pseudo-captions, after any
    method. Both need the method's matcher or embeddings; without them they are skipped.
    ``rare`` (``(n,) bool``): pairs whose caption is rare, which specificity leaves
    significant."""
    import numpy as np

    from ncclean.stages.pseudocaption import matcher_space, pseudo_captions
    from ncclean.stages.significance import SignificanceConfig
    from ncclean.stages.significance import significance as significance_stage
    from ncclean.train.scoring import embed, kept_dtype

    stages = _Stages(report={})
    embeddings = result.embeddings
    if embeddings is None and result.matcher is not None:
        embeddings = embed(result.matcher, features, device, dtype=kept_dtype(features))
    if embeddings is None:
        stages.report["skipped"] = "the method returned neither a matcher nor embeddings"
        return stages
    clean = parts == "clean_significant"
    if significance != "off" and (significance == "specificity" or result.matcher is not None):
        values, report = significance_stage(
            result.matcher, features, clean_prob, clean,
            SignificanceConfig(mode=significance, passes=passes), seed=seed, device=device,
            embeddings=embeddings, progress=progress)
        # Specificity cannot tell a caption that says nothing from one the space has not
        # learned; a caption used on at most rare_count images is no collection name, so it
        # stays significant (on clip art at 20% noise the measure demoted 357 of 1,572 such
        # clean pairs, and a retrain on clean_significant recovered 29% of the gap instead of
        # 129%: benchmarks/RESULTS.md, "Training on clean_significant").
        exempt = rare if significance == "specificity" else False
        parts[clean & (values < 1) & ~exempt] = "clean_insignificant"
        stages.significance = values
        stages.report["significance"] = report
    if pseudo:
        space = result.donor_space or matcher_space(embeddings, features)
        donor, donor_score, report = pseudo_captions(
            space, features, parts == "noisy",
            np.isin(parts, ["clean_significant", "clean_insignificant"]), seed=seed)
        stages.donor, stages.donor_score = donor, donor_score
        stages.report["pseudo_captions"] = report
    return stages


def _write_scored(corpus, features, out, result, clean_prob, parts, stages: _Stages,
                  seconds: dict[str, float], began: float, sidecar: dict,
                  save_matcher: PathLike | None) -> ScoreSummary:
    """Scatter the scored pairs back to input rows, write the output and sidecar, save the
    matcher; return the summary."""
    import time

    import numpy as np

    from ncclean.data.results import PairResults, partition_counts, write_results
    from ncclean.data.schema import NOISY_GT
    from ncclean.models.checkpoint import save_matcher as save_checkpoint
    from ncclean.provenance import versions

    n, rows = corpus.n_pairs, features.rows
    full_partition = np.full(n, "invalid", dtype=object)
    full_partition[rows] = parts
    donor_row = None
    if stages.donor is not None:  # pair indices -> input rows
        donor_row = np.full(n, -1, dtype=np.int64)
        has = stages.donor >= 0
        donor_row[rows[has]] = rows[stages.donor[has]]
    detection = None
    if NOISY_GT in corpus.source.schema.names:  # injected noise: say how well it was found
        from ncclean.evaluate.detection import detection_metrics

        truth = np.array(corpus.source.read_columns([NOISY_GT]).column(0).to_pylist(),
                         dtype=bool)[rows]
        detection = detection_metrics(truth, clean_prob, flagged=parts == "noisy").as_dict()

    writing = time.perf_counter()
    results = PairResults(
        clean_prob=_scatter(clean_prob, rows, n), partition=full_partition,
        significance=None if stages.significance is None else
        _scatter(stages.significance, rows, n),
        pseudo_caption_row=donor_row,
        pseudo_caption_score=None if stages.donor_score is None else
        _scatter(stages.donor_score, rows, n),
        method_columns={name: _scatter(values, rows, n)
                        for name, values in result.columns.items()})
    written = write_results(corpus, out, results, sidecar | {
        "estimated_noise_rate": result.noise_rate,
        "detection_vs_noisy_gt": detection,
        "stages": stages.report,
        "report": result.report,
        "seconds": seconds,
        "versions": versions("torch", "numpy", "pyarrow", "scikit-learn"),
    })
    if save_matcher is not None and result.matcher is not None:
        save_checkpoint(save_matcher, result.matcher, {"method": sidecar["method"],
                                                       "seed": sidecar["seed"],
                                                       "trained_on": sidecar["input"]})
    seconds["write"] = time.perf_counter() - writing
    seconds["total"] = time.perf_counter() - began
    return ScoreSummary(
        input=Path(sidecar["input"]), output=written, method=sidecar["method"],
        device=sidecar["device"], n_pairs=n, n_invalid=corpus.n_invalid,
        partition_counts=partition_counts(full_partition), noise_rate=result.noise_rate,
        seconds=seconds, detection=detection,
        n_pseudo_captions=0 if donor_row is None else int((donor_row >= 0).sum()))


@dataclass(frozen=True)
class SplitSummary:
    """What :func:`split` wrote: one file per partition with its row count (they add up to the
    input's), the noise estimates, the most confidently noisy pairs (for ``--report``) and the
    HTML report's path if one was asked for."""

    input: Path
    out_dir: Path
    n_rows: int
    partition_counts: dict[str, int]
    files: dict[str, str]
    noise: dict
    method: str | None
    cut: dict | None
    most_noisy: list[dict]
    html: Path | None = None
    html_bytes: int | None = None

    def as_dict(self) -> dict:
        return _as_dict(self)


def split(input: PathLike, out_dir: PathLike, *, html: PathLike | None = None,
          image_col: str = "image", caption_col: str = "caption", per_partition: int = 40,
          top: int = 10, seed: int = 0) -> SplitSummary:
    """Split a scored file into ``out_dir/<partition>.parquet`` (every partition, ``invalid``
    included) and write ``out_dir/summary.json``; with ``html``, also the HTML report
    (:mod:`ncclean.report.html`). The files' row counts are read back and must add up to the
    input's."""
    import numpy as np
    import pyarrow.parquet as pq

    from ncclean.data.parquet import write_json
    from ncclean.data.split import split_by_partition
    from ncclean.report.scored import fetch_rows, noise_estimate, open_scored

    scored = open_scored(input)
    out_dir = Path(out_dir)
    paths = split_by_partition(scored.source, out_dir)
    written = {name: pq.ParquetFile(path).metadata.num_rows for name, path in paths.items()}
    if sum(written.values()) != scored.n_rows or written != scored.counts():
        raise RuntimeError(f"split wrote {sum(written.values())} rows for {scored.n_rows} input "
                           f"rows ({written} against {scored.counts()})")
    noisy = scored.rows_in("noisy")
    noisy = noisy[np.argsort(scored.clean_prob[noisy], kind="stable")[:top]]
    values = fetch_rows(scored.source, noisy, ["id", caption_col, "pseudo_caption",
                                                "pseudo_caption_score", "clean_prob"])
    most_noisy = [{"row": int(r), **values.get(int(r), {})} for r in noisy]
    html_path = html_size = None
    if html is not None:
        from ncclean.report.html import html_report, write_html

        text = html_report(scored, image_col=image_col, caption_col=caption_col,
                           per_partition=per_partition, seed=seed)
        html_path = write_html(html, text)
        html_size = html_path.stat().st_size
    summary = SplitSummary(
        input=Path(input), out_dir=out_dir, n_rows=scored.n_rows, partition_counts=written,
        files={name: str(path) for name, path in paths.items()},
        noise=noise_estimate(scored, seed).as_dict(), method=scored.sidecar.get("method"),
        cut=scored.sidecar.get("cut"), most_noisy=most_noisy, html=html_path,
        html_bytes=html_size)
    write_json(out_dir / "summary.json", summary.as_dict() | {"scoring": scored.sidecar})
    return summary


@dataclass(frozen=True)
class CheckResult:
    """The verdict of :func:`check`: ``passed``, one line saying why, the shares it judged
    (``noisy`` and ``vague`` of the valid pairs, ``invalid`` of all rows) and the counts."""

    input: Path
    passed: bool
    verdict: str
    shares: dict[str, float]
    partition_counts: dict[str, int]
    limits: dict[str, float | None]
    previous: dict[str, float] | None = None

    def as_dict(self) -> dict:
        return _as_dict(self)


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    valid = total - counts.get("invalid", 0)
    return {"noisy": counts.get("noisy", 0) / valid if valid else 0.0,
            "vague": counts.get("vague", 0) / valid if valid else 0.0,
            "invalid": counts.get("invalid", 0) / total if total else 0.0}


def check(input: PathLike, *, max_noisy: float | None = None, max_vague: float | None = None,
          max_invalid: float | None = None, against: PathLike | None = None,
          max_increase: float = 0.01) -> CheckResult:
    """Judge a scored file for a data-quality gate: it fails when the noisy (or vague) share of
    valid pairs, or the invalid share of rows, exceeds its bound, or, ``against`` a previous
    run's summary (a scored file's sidecar, ``split``'s ``summary.json`` or ``check --json``
    output), when the noisy share grew by more than ``max_increase``."""
    import json

    from ncclean.errors import BadOptionError, NcCleanError
    from ncclean.report.scored import open_scored

    limits = {"noisy": max_noisy, "vague": max_vague, "invalid": max_invalid}
    for name, bound in limits.items():
        if bound is not None and not 0.0 <= bound <= 1.0:
            raise BadOptionError(f"--max-{name} must lie in [0, 1], got {bound}")
    if all(bound is None for bound in limits.values()) and against is None:
        raise BadOptionError("nothing to check: give --max-noisy, --max-vague, --max-invalid "
                             "or --against")
    previous = None
    if against is not None:
        try:
            earlier = json.loads(Path(against).read_text())
            previous = _shares({k: int(v) for k, v in earlier["partition_counts"].items()})
        except FileNotFoundError:
            raise NcCleanError(f"--against {against}: no such file") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise NcCleanError(f"--against {against}: not a run summary with partition_counts "
                               "(use a scored file's .json sidecar, split's summary.json or "
                               "check --json output)") from None
    counts = open_scored(input).counts()
    shares = _shares(counts)
    failures, fine = [], []
    for name, bound in limits.items():
        if bound is None:
            continue
        said = f"{name} {shares[name]:.1%}"
        (failures if shares[name] > bound else fine).append(
            f"{said} {'>' if shares[name] > bound else '<='} {bound:.1%}")
    if previous is not None:
        change = shares["noisy"] - previous["noisy"]
        said = (f"noisy {shares['noisy']:.1%} against {previous['noisy']:.1%} before "
                f"({change * 100:+.1f} points")
        (failures if change > max_increase else fine).append(
            f"{said}, {'over' if change > max_increase else 'within'} the allowed "
            f"{max_increase * 100:+.1f})")
    passed = not failures
    verdict = ("PASS: " + "; ".join(fine)) if passed else ("FAIL: " + "; ".join(failures))
    return CheckResult(input=Path(input), passed=passed, verdict=verdict, shares=shares,
                       partition_counts=counts, limits=limits | {"max_increase": max_increase},
                       previous=previous)


@dataclass(frozen=True)
class RetrainSummary:
    """What :func:`retrain` measured: per arm its training size and Recall@K (strict and by
    text identity), and the share of the noisy-to-oracle rSum gap the cleaned arm recovered."""

    input: Path
    test: Path
    n_test: int
    steps: int
    schedule: str
    seed: int
    keep: str
    pseudo_captions: bool
    image_encoder: str
    text_encoder: str
    arms: dict[str, dict]
    gap_recovered: float | None
    n_valid: int | None = None  # the scored corpus's valid pairs, which the arms select from

    def as_dict(self) -> dict:
        return _as_dict(self)


def _saved_matcher_arm(saved, path: PathLike, test: PathLike, held_out, test_features, config,
                       columns: Columns, cache: Path | None, device: str, progress: Progress
                       ) -> dict:
    """Recall@K on the test pairs of ``saved``, the matcher loaded from ``path``, with features
    built for its own configuration (its vocabulary, image size) unless the retrained arms' fit
    it."""
    import time

    from ncclean.data.corpus import read_corpus
    from ncclean.evaluate.retrain import evaluate
    from ncclean.models.checkpoint import read_meta
    from ncclean.models.features import build_features

    began = time.perf_counter()
    own = saved.config
    if own.to_dict() != config.to_dict():
        if own.image_tower == "pixels" and own.image_size != config.image_size:
            held_out = read_corpus(test, columns, image_size=own.image_size, cache_dir=cache,
                                   progress=progress)
        test_features = build_features(held_out, own, cache_dir=cache, device=device,
                                       progress=progress)
    return {"n_pairs": None, "path": str(path), "method": read_meta(path).get("method"),
            **evaluate(saved, test_features, device), "seconds": time.perf_counter() - began}


def retrain(
    input: PathLike,
    test: PathLike,
    *,
    keep: str = "clean",
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
    progress: Progress = no_progress,
) -> RetrainSummary:
    """Train a fresh plain matcher on what the scoring run of ``input`` kept and measure
    Recall@K on ``test`` (:mod:`ncclean.evaluate.retrain`); with ``baseline``, also on every
    valid pair and, when ``input`` has ``noisy_gt``, on the truly clean pairs. The matcher's
    architecture and encoders are the scoring run's (from its sidecar); ``image_encoder`` /
    ``text_encoder`` other than ``auto`` replace a tower (e.g. score with ``e5`` captions and
    retrain the GRU over words on what that run kept); a ``column`` tower reads the embedding
    column the scoring run read unless ``columns`` names another. Each arm also reports its
    learning curve: test rSum every ``eval_every`` steps at epoch ends (``None``: every
    ``steps // 16``; 0: off), how fast it was still rising over the curve's second half
    (``late_slope``), and its best stretch and how far the end fell below it (``best``).
    ``schedule``: the learning rate of every arm, ``constant`` or ``cosine`` (from 2e-4 down to 0
    over the steps). ``matcher``: a saved matcher (``score --save-matcher``, the method's own
    noise-robust training) evaluated untrained on ``test`` as one more arm, ``matcher``, with its
    own share of the gap; how the papers judge a method, where the other arms judge its
    selection."""

    import numpy as np

    from ncclean.data.cache import default_cache_dir
    from ncclean.data.corpus import read_corpus
    from ncclean.data.results import PARTITIONS
    from ncclean.errors import BadOptionError, SchemaError
    from ncclean.evaluate.retrain import (
        KEEPS,
        SCHEDULES,
        Arm,
        RetrainConfig,
        cleaned_arm,
        gap_recovered,
        run_arms,
    )
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.matcher import MatcherConfig
    from ncclean.models.resolve import override_towers, require_columns, scoring_columns
    from ncclean.report.scored import open_scored

    if keep not in KEEPS:
        raise BadOptionError(f"--keep must be one of {', '.join(KEEPS)}, got {keep!r}")
    if steps < 1:
        raise BadOptionError(f"--steps must be at least 1, got {steps}")
    if eval_every is None:
        eval_every = max(1, steps // 16)
    if eval_every < 0:
        raise BadOptionError(f"--eval-every must be 0 (off) or a number of steps, got {eval_every}")
    if schedule not in SCHEDULES:
        raise BadOptionError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    device = resolve_device(device)
    cache = default_cache_dir() if cache_dir is True else (Path(cache_dir) if cache_dir else None)
    scored = open_scored(input)
    if pseudo_captions and "pseudo_caption_id" not in scored.source.schema.names:
        raise SchemaError(f"{input} has no pseudo_caption_id column; score it with "
                          "pseudo-captions on")
    if keep == "significant" and scored.sidecar.get("significance") == "off":
        raise BadOptionError(f"{input} was scored with --significance off, so every clean pair "
                             "is clean_significant; score it with the significance stage on, or "
                             "use --keep clean")
    settings = scored.sidecar.get("matcher", {})
    config = override_towers(
        MatcherConfig.from_dict({k: v for k, v in settings.items() if k != "vocab"}),
        image_encoder, text_encoder)
    columns = scoring_columns(config, columns, scored.sidecar)
    require_columns(config, columns)
    saved = None
    if matcher is not None:  # before hours of training, not after
        from ncclean.models.checkpoint import load_matcher

        saved = load_matcher(matcher, device)
        require_columns(saved.config, columns)

    size = config.image_size if config.image_tower == "pixels" else None
    corpus = read_corpus(input, columns, image_size=size, cache_dir=cache, progress=progress)
    held_out = read_corpus(test, columns, image_size=size, cache_dir=cache, progress=progress)
    if held_out.valid.sum() < 2:
        raise BadOptionError(f"{test}: fewer than 2 usable test pairs")
    complete_config(config, corpus)
    features = build_features(corpus, config, cache_dir=cache, device=device, progress=progress)
    test_features = build_features(held_out, config, cache_dir=cache, device=device,
                                   progress=progress)

    rows = features.rows
    partition = np.asarray(PARTITIONS, dtype=object)[scored.partition[rows]]
    clean_prob = scored.clean_prob[rows]
    pseudo = None
    if pseudo_captions:
        row_of = {pair_id: row for row, pair_id in enumerate(corpus.ids.to_pylist())}
        donors = scored.source.read_columns(["pseudo_caption_id"]).column(0).to_pylist()
        donor_row = np.array([row_of.get(d, -1) if d is not None else -1 for d in donors])[rows]
        pseudo = np.where(donor_row >= 0, corpus.text_group[np.maximum(donor_row, 0)], -1)
    arm = cleaned_arm(partition, clean_prob, keep, pseudo)
    if len(arm.pairs) < 2:
        raise BadOptionError(f"--keep {keep} selects {len(arm.pairs)} pairs; nothing to train on")
    arms = [arm]
    if baseline:
        everyone = np.arange(features.n_pairs)
        arms.append(Arm("noisy", everyone, np.ones(len(everyone))))
        if scored.noisy_gt is not None:
            truth = scored.noisy_gt[rows]
            arms.append(Arm("oracle", np.flatnonzero(~truth), np.ones(int((~truth).sum()))))
    retrain_config = RetrainConfig(steps=steps, eval_every=eval_every, schedule=schedule)
    results = run_arms(features, test_features, arms, config, retrain_config, seed, device,
                       progress)
    if saved is not None:
        results["matcher"] = _saved_matcher_arm(saved, matcher, test, held_out, test_features,
                                                config, columns, cache, device, progress)
        results["matcher"]["gap_recovered"] = gap_recovered(results, "matcher")
    return RetrainSummary(input=Path(input), test=Path(test), n_test=test_features.n_pairs,
                          steps=steps, schedule=schedule, seed=seed, keep=keep,
                          pseudo_captions=pseudo_captions,
                          image_encoder=config.image_tower, text_encoder=config.text_tower,
                          arms=results, gap_recovered=gap_recovered(results, arm.name),
                          n_valid=features.n_pairs)
