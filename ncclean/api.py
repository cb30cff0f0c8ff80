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
    rate, and how long each phase took (seconds)."""

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

    def as_dict(self) -> dict:
        return _as_dict(self)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``; ``cuda`` without one is an
    error."""
    import torch

    from ncclean.errors import BadOptionError

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadOptionError("--device cuda: no CUDA device is available (torch "
                             f"{torch.__version__}); use --device cpu or auto")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise BadOptionError(f"--device must be auto, cpu or cuda, got {device!r}")
    return device


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
    clean_above: float = 0.5,
    noisy_below: float = 0.5,
    noise_rate: float | str | None = None,
    load_matcher: PathLike | None = None,
    save_matcher: PathLike | None = None,
    checkpoint_dir: PathLike | None = None,
    resume: bool = False,
    cache_dir: PathLike | None | bool = True,
    strict: bool = False,
    max_image_pixels: int | None = None,
    progress: Progress = no_progress,
) -> ScoreSummary:
    """Score every pair of ``input`` with ``method`` and write the output contract to
    ``output`` (plus ``<output>.json``).

    Encoders: ``image_encoder`` ``pixels`` (a CNN trained on the decoded images) or ``column``
    (``columns.image_emb``); ``text_encoder`` ``tokens`` (a GRU over words), ``e5`` (frozen
    multilingual-e5-small) or ``column`` (``columns.text_emb``); ``auto`` picks ``column`` when
    the embedding column is named. A loaded matcher brings its own encoders. Partitions follow
    ``clean_above`` / ``noisy_below``, or ``noise_rate`` (a share, or ``"auto"`` for the method's
    estimate). ``cache_dir=True`` uses the default cache; ``None``/``False`` disables it.
    """
    import time

    import numpy as np

    from ncclean.data.cache import default_cache_dir
    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.data.parquet import check_output_path
    from ncclean.data.results import PairResults, partition_counts, write_results
    from ncclean.data.schema import NOISY_GT
    from ncclean.errors import BadOptionError
    from ncclean.methods.base import Context, make_method
    from ncclean.models.checkpoint import load_matcher as load_checkpoint
    from ncclean.models.checkpoint import save_matcher as save_checkpoint
    from ncclean.models.features import build_features, build_vocabulary
    from ncclean.models.matcher import IMAGE_TOWERS, TEXT_TOWERS, MatcherConfig
    from ncclean.provenance import versions
    from ncclean.stages.partition import Cut, partition

    seconds: dict[str, float] = {}
    began = time.perf_counter()
    device = resolve_device(device)
    chosen = make_method(method, params)
    if isinstance(noise_rate, str) and noise_rate != "auto":
        raise BadOptionError(f"--noise-rate must be a number in [0, 1] or auto, got {noise_rate!r}")
    cut = Cut(clean_above, noisy_below, None if noise_rate in (None, "auto") else
              float(noise_rate))
    cache = default_cache_dir() if cache_dir is True else (Path(cache_dir) if cache_dir else None)

    initial = None
    if load_matcher is not None:
        initial = load_checkpoint(load_matcher, device)
        config = initial.config
    else:
        image_tower = image_encoder if image_encoder != "auto" else \
            ("column" if columns.image_emb else "pixels")
        text_tower = text_encoder if text_encoder != "auto" else \
            ("column" if columns.text_emb else "tokens")
        if image_tower not in IMAGE_TOWERS or text_tower not in TEXT_TOWERS:
            raise BadOptionError(f"encoders: image one of {IMAGE_TOWERS}, text one of "
                                 f"{TEXT_TOWERS}; got {image_encoder!r}, {text_encoder!r}")
        config = MatcherConfig(image_tower=image_tower, text_tower=text_tower,
                               embed_dim=embed_dim, image_size=image_size)
    if config.image_tower == "column" and not columns.image_emb:
        raise BadOptionError("the column image encoder needs --image-emb-col")
    if config.text_tower == "column" and not columns.text_emb:
        raise BadOptionError("the column text encoder needs --text-emb-col")

    corpus = read_corpus(
        input, columns, strict=strict,
        image_size=config.image_size if config.image_tower == "pixels" else None,
        max_image_pixels=max_image_pixels or DEFAULT_MAX_PIXELS, cache_dir=cache,
        progress=progress)
    out = check_output_path(output, corpus.source)  # fail now, not after training
    valid = corpus.valid
    if valid.sum() < 2:
        raise BadOptionError(f"{input}: only {int(valid.sum())} usable pairs; "
                             "scoring needs at least 2 (see invalid_reason with ncclean inspect)")
    if config.text_tower == "tokens" and config.vocab is None:
        config.vocab = build_vocabulary([c for c, ok in zip(corpus.captions, valid) if ok]).tokens
    if config.image_tower == "column":
        config.image_in_dim = config.image_in_dim or corpus.image_emb.shape[1]
    if config.text_tower == "column":
        config.text_in_dim = config.text_in_dim or corpus.text_emb.shape[1]
    if config.text_tower == "e5":
        config.text_in_dim = 384
    features = build_features(corpus, config, cache_dir=cache, progress=progress)
    seconds["read"] = time.perf_counter() - began

    context = Context(seed=seed, device=device, progress=progress, matcher_config=config,
                      initial=initial,
                      checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
                      resume=resume)
    fitted = time.perf_counter()
    result = chosen.fit(features, context)
    seconds["method"] = time.perf_counter() - fitted

    clean_prob = np.asarray(result.clean_prob, dtype=np.float64)
    if clean_prob.shape != (features.n_pairs,):
        raise ValueError(f"method {method!r} returned {clean_prob.shape} scores for "
                         f"{features.n_pairs} pairs")
    estimated = result.noise_rate
    if noise_rate == "auto":
        if estimated is None:
            raise BadOptionError(f"--noise-rate auto: method {method!r} gives no estimate")
        cut = Cut(clean_above, noisy_below, float(estimated))

    n, rows = corpus.n_pairs, features.rows
    full_prob = np.full(n, np.nan)
    full_prob[rows] = clean_prob
    full_partition = np.full(n, "invalid", dtype=object)
    full_partition[rows] = partition(clean_prob, cut)
    method_columns = {}
    for name, values in result.columns.items():
        values = np.asarray(values)
        full = np.full(n, np.nan) if np.issubdtype(values.dtype, np.floating) else \
            np.zeros(n, dtype=values.dtype)
        full[rows] = values
        method_columns[name] = full

    detection = None
    if NOISY_GT in corpus.source.schema.names:  # injected noise: say how well it was found
        from ncclean.evaluate.detection import detection_metrics

        truth = np.array(corpus.source.read_columns([NOISY_GT]).column(0).to_pylist(),
                         dtype=bool)[rows]
        detection = detection_metrics(truth, clean_prob,
                                      flagged=full_partition[rows] == "noisy").as_dict()

    writing = time.perf_counter()
    sidecar = {
        "command": "score",
        "input": str(input),
        "method": method,
        "params": chosen.params(),
        "seed": seed,
        "device": device,
        "matcher": {k: v for k, v in config.to_dict().items() if k != "vocab"}
        | {"vocab_size": len(config.vocab) if config.vocab else None,
           "loaded_from": str(load_matcher) if load_matcher else None},
        "cut": {"clean_above": cut.clean_above, "noisy_below": cut.noisy_below,
                "noise_rate": cut.noise_rate, "noise_rate_source":
                "auto" if noise_rate == "auto" else ("given" if noise_rate is not None
                                                     else None)},
        "estimated_noise_rate": estimated,
        "detection_vs_noisy_gt": detection,
        "report": result.report,
        "versions": versions("torch", "numpy", "pyarrow", "scikit-learn"),
    }
    results = PairResults(clean_prob=full_prob, partition=full_partition,
                          method_columns=method_columns)
    written = write_results(corpus, out, results, sidecar | {"seconds": seconds})
    if save_matcher is not None and result.matcher is not None:
        save_checkpoint(save_matcher, result.matcher, {"method": method, "seed": seed,
                                                       "trained_on": str(input)})
    seconds["write"] = time.perf_counter() - writing
    seconds["total"] = time.perf_counter() - began
    return ScoreSummary(
        input=Path(input), output=written, method=method, device=device, n_pairs=n,
        n_invalid=corpus.n_invalid, partition_counts=partition_counts(full_partition),
        noise_rate=estimated, seconds=seconds, detection=detection)
