"""The fit and the write of the scoring pipeline (:mod:`ncclean.pipeline.sharded`), and the
checks of a one-file output: :func:`fit_corpus` reads the pairs it is given (a whole corpus or
a fit sample), builds their features, fits the method, cuts and runs the stages;
:func:`write_fitted` writes a fit made on every pair of the input as the output contract and
its sidecar (the fit's own results: no fit is kept). A fit to apply to other pairs is kept from
:func:`fit_corpus`'s state by :mod:`ncclean.pipeline.keep`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ncclean.options import AUTO_METHOD, RunOptions, ScoreRequest
from ncclean.progress import Progress, no_progress
from ncclean.records import Summary

PathLike = str | os.PathLike


@dataclass(frozen=True)
class ScoreSummary(Summary):
    """What a scoring run did: where the output is, its partition counts, the estimated noise
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
    noise_interval: tuple[float, float] | None = None
    detection: dict[str, float] | None = None
    n_pseudo_captions: int = 0
    warnings: list[str] = field(default_factory=list)
    resumed: tuple[int, int] | None = None  # a folder run: its shards found complete, of all
    _rows: object = field(default=None, repr=False, compare=False)

    @property
    def rows(self):
        """The scored rows as a pyarrow Table (read from ``output`` when first asked for)."""
        if self._rows is None:
            from ncclean.pipeline.frames import read_rows

            object.__setattr__(self, "_rows", read_rows(Path(self.output)))
        return self._rows

    RECORD_KEYS = {"n_pairs": "n_rows", "noise_rate": "estimated_noise_rate",
                   "noise_interval": "estimated_noise_ci95", "detection": "detection_vs_noisy_gt"}
    """The run record's names of the facts a field holds under another name."""

    def as_dict(self) -> dict:
        """What ``score --json`` prints: the fields, each fact the run record also holds under
        the record's key (:attr:`RECORD_KEYS`) and with the record's value."""
        return {self.RECORD_KEYS.get(k, k): v for k, v in super().as_dict().items()
                if k != "_rows"}


def cache_path(cache_dir: PathLike | bool | None) -> Path | None:
    """``True``: the default cache; ``None`` or ``False``: none; else that folder."""
    from ncclean.data.cache import default_cache_dir

    if cache_dir is True:
        return default_cache_dir()
    return Path(cache_dir) if cache_dir else None


def default_output(input: PathLike) -> Path:
    """Where ``score`` writes when no output is given: ``pairs.parquet`` ->
    ``pairs.scored.parquet`` beside it (a folder of shards ``shards/`` -> ``shards.scored.parquet``
    beside the folder)."""
    input = Path(input)
    name = input.name[:-len(".parquet")] if input.name.endswith(".parquet") else input.name
    return input.with_name(name + ".scored.parquet")


def written_by_score(path: PathLike) -> bool:
    """Whether the file ``path`` holds the run record of an ``ncclean score`` run (its metadata,
    or for older files the ``.json`` copy), so that a default output may replace it."""
    from ncclean.data.parquet import open_pairs
    from ncclean.data.scored import run_record
    from ncclean.errors import NcCleanError

    try:
        return run_record(open_pairs(path)).get("command") == "score"
    except NcCleanError:
        return False


def resume_warning(run: RunOptions, input: PathLike | None = None,
                   output: PathLike | None = None, scale=None) -> str | None:
    """The warning for ``--resume`` with nothing to resume from (the run starts from scratch),
    ``None`` when there is something or no resume was asked for. A sharded run into a folder
    (``input``, ``output`` and ``scale``, :class:`~ncclean.options.ScaleOptions`, say whether
    this one is) resumes by itself, skipping its complete shards: without ``--checkpoint-dir``
    it has nothing to warn about."""
    if not run.resume:
        return None
    if run.checkpoint_dir is None:
        if _resumes_by_shards(input, output, scale):
            return None
        return "--resume without --checkpoint-dir: nothing to resume; starting from scratch"
    folder = Path(run.checkpoint_dir)
    if folder.is_dir() and any(folder.rglob(f"{CHECKPOINT_STATE}.json")):
        return None
    return f"--resume: no checkpoint in {folder}; starting from scratch"


def _resumes_by_shards(input: PathLike | None, output: PathLike | None, scale) -> bool:
    """Whether the run writes a folder of shards (:func:`ncclean.pipeline.route.writes_folder`)."""
    if input is None or output is None:
        return False
    from ncclean.pipeline.route import writes_folder

    return writes_folder(input, output, scale)


CHECKPOINT_STATE = "training-state.safetensors"
"""The name :mod:`ncclean.train.loop` saves a training state under (with a ``.json``)."""


def prepare_output(input: PathLike, output: PathLike | None, overwrite: bool = False) -> Path:
    """The output path (``None``: :func:`default_output`, refused when a file there was not
    written by ``score``; a given one refused when ncclean did not write the file there, unless
    ``overwrite``), checked against the input and probed for writing
    (:func:`ncclean.data.parquet.check_output_path`): an error in the first second of a run, not
    after it."""
    from ncclean.data.parquet import check_not_foreign, check_output_path, open_pairs
    from ncclean.errors import OutputError

    source = open_pairs(input)
    if output is None:
        output = default_output(input)
        if Path(output).exists() and not written_by_score(output):
            raise OutputError(f"{output} exists and was not written by 'ncclean score'; give "
                              "-o to write elsewhere, or remove it")
    check_not_foreign(output, overwrite, input)
    return check_output_path(output, source)


def check_write(input: PathLike, columns, write: str) -> None:
    """``--write scores`` needs an id column to join on: :class:`BadOptionError` when the input
    (its first shard) has none (``--id-col``, else ``id``), before any work. A webdataset's keys
    are its ids."""
    if write != "scores":
        return
    from ncclean.data.shards import list_shards, read_shard
    from ncclean.errors import BadOptionError

    first = list_shards(input)[0]
    if first.kind == "webdataset":
        return
    import pyarrow.parquet as pq

    names = pq.read_schema(first.path).names if first.kind == "parquet" \
        else read_shard(first).schema.names
    name = columns.id or "id"
    if name not in names:
        raise BadOptionError(f"--write scores needs an id column to join on ({name!r} is not in "
                             f"{first.path}; name it with --id-col), or use --write all")


STRICT_IMAGE_SIZE = 8
"""The side ``--strict`` decodes images to, to check them, where the tower decodes them itself."""


def decoded_size(config) -> int | None:
    """The side images are decoded to for ``config``'s image tower, ``None`` when it reads no
    pixels (the tower registry's :func:`ncclean.models.resolve.pixel_size`)."""
    from ncclean.models.resolve import pixel_size

    return pixel_size(config)


def fit_corpus(request: ScoreRequest, progress: Progress = no_progress) -> dict:
    """The fit of the pipeline (:mod:`ncclean.pipeline.sharded`) on every pair of the request's
    ``input`` (the whole corpus, or the fit sample written from it): read the pairs, build their
    features (the towers embed them), fit the ``method`` with its ``params``, cut, and run the
    stages. Checks what it can before the work: the method and its parameters, the encoders,
    that two pairs are usable. The fit in memory, a dict: ``corpus``, ``features``, ``result``,
    ``clean_prob`` ``(n_pairs,) float64``, ``parts`` ``(n_pairs,) object``, ``stages``,
    ``cut`` (resolved), ``config`` (the matcher's), and for the run record ``method`` (resolved),
    ``asked``, ``chosen`` (the method object), ``seconds``, ``began``, ``warnings``.
    :func:`write_fitted` writes it; :func:`ncclean.pipeline.keep.fit_from_state` keeps it as a
    fit to apply to other pairs."""
    input, method, params = request.input, request.method, request.params
    columns, matcher, cut, stages, run = (request.columns, request.matcher, request.cut,
                                          request.stages, request.run)
    device = request.device
    import numpy as np

    from ncclean.data.corpus import read_corpus
    from ncclean.data.images import DEFAULT_MAX_PIXELS
    from ncclean.errors import BadOptionError
    from ncclean.methods.base import Context, make_method
    from ncclean.methods.choose import auto_method, small_corpus_advice
    from ncclean.models.features import build_features, complete_config
    from ncclean.models.registry import decodes_images
    from ncclean.models.resolve import matcher_config
    from ncclean.stages.partition import caption_counts, partition
    from ncclean.stages.run import run_stages

    seconds: dict[str, float] = {}
    began = time.perf_counter()
    if method != AUTO_METHOD:
        chosen = make_method(method, params)  # a bad parameter is found before a matcher loads
        check_cut_applies(chosen, cut, request.given)
    cache = cache_path(run.cache_dir)
    config, initial = matcher_config(
        columns, matcher.image_encoder, matcher.text_encoder, matcher.embed_dim,
        matcher.image_size, matcher.load_matcher, device, matcher.clip())
    asked = method
    if method == AUTO_METHOD:
        method = auto_method(config, initial)
        try:
            chosen = make_method(method, params)
        except BadOptionError as error:
            raise BadOptionError(f"{error} (--method auto chose {method} for the "
                                 f"{config.image_tower} and {config.text_tower} towers; name "
                                 "--method to choose another)") from None
        check_cut_applies(chosen, cut, request.given)
    if run.save_matcher is not None and not getattr(chosen, "saves_matcher", True):
        raise BadOptionError(f"--save-matcher: the checkpoint format cannot hold {method}'s "
                             "matcher yet (it adds heads to a plain matcher); score without it")
    max_pixels = run.max_image_pixels or DEFAULT_MAX_PIXELS
    warnings: list[str] = []

    if run.strict and decoded_size(config) is None and decodes_images(config):
        # the tower decodes the images later: decode them now, so --strict names every bad row
        read_corpus(input, columns, strict=True, image_size=STRICT_IMAGE_SIZE,
                    max_image_pixels=max_pixels, progress=progress)
    corpus = read_corpus(input, columns, strict=run.strict, image_size=decoded_size(config),
                         max_image_pixels=max_pixels, cache_dir=cache, progress=progress)
    if corpus.valid.sum() < 2:
        usable = int(corpus.valid.sum())
        raise BadOptionError(f"{input}: only {usable} usable pair{'s' if usable != 1 else ''}; "
                             f"scoring needs at least 2 ({_why_invalid(corpus)})")
    complete_config(config, corpus)
    features = build_features(corpus, config, cache_dir=cache, device=device,
                              max_pixels=max_pixels, progress=progress)
    if features.n_pairs < 2:
        raise BadOptionError(f"{input}: only {features.n_pairs} usable "
                             f"pair{'s' if features.n_pairs != 1 else ''}; scoring needs at "
                             f"least 2 ({_why_invalid(corpus)})")
    seconds["read"] = time.perf_counter() - began
    context = Context(
        seed=run.seed, device=device, progress=progress, matcher_config=config, initial=initial,
        checkpoint_dir=Path(run.checkpoint_dir) if run.checkpoint_dir else None,
        resume=run.resume)
    if features.n_pairs < (minimum := chosen.measured_minimum(features, context)):
        rows = request.corpus_pairs  # a sample's corpus, by rows; its valid pairs estimated
        grows = request.scale.sample_size is not None and rows is not None \
            and request.scale.sample_size < rows \
            and rows * features.n_pairs >= minimum * len(corpus.valid)
        advice = small_corpus_advice(method, config, initial, rows if grows else None)
        warnings.append(f"{features.n_pairs:,} pairs is below the {minimum:,} that {method} was "
                        "measured to need (benchmarks/results/small-corpora.md): its scores "
                        f"here are unreliable; {advice}")

    fitted = time.perf_counter()
    progress(f"fitting {method} on {features.n_pairs:,} pairs", 0, 0)
    result = chosen.fit(features, context)
    seconds["method"] = time.perf_counter() - fitted
    clean_prob = np.asarray(result.clean_prob, dtype=np.float64)
    if clean_prob.shape != (features.n_pairs,):
        raise ValueError(f"method {method!r} returned {clean_prob.shape} scores for "
                         f"{features.n_pairs} pairs")
    resolved = cut.with_estimate(result.noise_rate, method)
    if result.partition is None:  # a method that draws its own partitions uses no band
        resolved = resolved.with_recall(clean_prob).with_queue(clean_prob,
                                                               result.noise_interval)
        if moved := resolved.moved(request.given):
            warnings.append(moved)

    staged = time.perf_counter()
    counts = caption_counts(features.text_group)
    parts = partition(clean_prob, resolved, counts) \
        if result.partition is None else np.asarray(result.partition, dtype=object).copy()
    added = run_stages(result, features, clean_prob, parts, stages,
                       rare=counts <= resolved.rare_count, seed=run.seed, device=device,
                       corpus_pairs=request.corpus_pairs, progress=progress)
    seconds["stages"] = time.perf_counter() - staged
    if stages.significance == "update" and result.matcher is None:
        warnings.append(f"--significance update reads a trained matcher's ratio (Self-Drop & "
                        f"Dual-Weight), and {method} on these towers trains none: no pair was "
                        "split by significance; --significance specificity (the default) reads "
                        "any space")
    return {"corpus": corpus, "features": features, "result": result, "clean_prob": clean_prob,
            "parts": parts, "stages": added, "cut": resolved, "config": config,
            "method": method, "asked": asked, "chosen": chosen, "seconds": seconds,
            "began": began, "warnings": warnings}


def check_cut_applies(chosen, cut, given: frozenset[str] = frozenset()) -> None:
    """:class:`BadOptionError` for a cut option the user set (:meth:`Cut.named
    <ncclean.options.Cut.named>`; ``given``: the command line's) where the ``chosen`` method
    draws the partitions itself (:meth:`~ncclean.methods.base.Method.own_partitions`): the
    option would be ignored."""
    from ncclean.errors import BadOptionError

    reason = chosen.own_partitions()
    named = cut.named(given) if reason is not None else []
    if named:
        raise BadOptionError(f"{named[0]} does not apply: {reason}, so it would be ignored; "
                             "leave it out")


def write_fitted(request: ScoreRequest, state: dict) -> ScoreSummary:
    """Write the fit ``state`` (:func:`fit_corpus` on the request's whole ``input``) as the
    output contract to the request's ``output`` (prepared: :func:`prepare_output`), with its
    run record: a pair the fit was made on is written with the fit's own results. The run's
    summary, with the fit's warnings."""
    from ncclean.models.registry import image_tower
    from ncclean.stages.run import significance_mode

    matcher, cut, stages, run = request.matcher, request.cut, request.stages, request.run
    corpus, result, config = state["corpus"], state["result"], state["config"]
    method, chosen = state["method"], state["chosen"]
    sidecar = {
        "command": "score", "input": str(request.input), "method": method,
        "method_chosen_by": "auto" if state["asked"] == AUTO_METHOD else "user",
        "params": chosen.params(), "seed": run.seed, "device": request.device,
        "columns": {"image_emb": corpus.columns.image_emb, "text_emb": corpus.columns.text_emb},
        "matcher": {k: v for k, v in config.to_dict().items() if k != "vocab"}
        | {"vocab_size": len(config.vocab) if config.vocab else None,
           "loaded_from": str(matcher.load_matcher) if matcher.load_matcher else None},
        "cut": state["cut"].record(cut, by_method=result.partition is not None),
        "image_arithmetic": image_tower(config).arithmetic(request.device),
        "significance": significance_mode(stages, result), "write": run.write,
        "options": request.options(), "warnings": fit_warnings(state),
    } | request.provenance([shard.path for shard in corpus.source.shards], corpus.source.path)
    summary = write_scored(corpus, state["features"], Path(request.output), result,
                           state["clean_prob"], state["parts"], state["stages"],
                           state["seconds"], state["began"], sidecar, run.save_matcher,
                           run.write)
    resuming = resume_warning(run)  # a run of shards resumes by them; one file does not
    summary.warnings.extend(([resuming] if resuming else []) + fit_warnings(state))
    return summary


def fit_warnings(state: dict) -> list[str]:
    """What the fit ``state`` (:func:`fit_corpus`) warned of: the pipeline's, then the
    method's."""
    return state["warnings"] + list(state["result"].report.get("warnings", []))


def _why_invalid(corpus) -> str:
    """The most common reason rows are invalid, with what to do about it, for a one-line error."""
    counts = corpus.invalid_counts()
    if not counts:
        return "see invalid_reason with ncclean inspect"
    reason, count = max(counts.items(), key=lambda item: item[1])
    example = next(r for r in corpus.reasons if r is not None and reason in r)
    return f"{count:,} rows: {example.split('; ')[0]}; see ncclean inspect"


def write_scored(corpus, features, out: Path, result, clean_prob, parts, stages, seconds: dict,
                 began: float, sidecar: dict, save_matcher: PathLike | None,
                 write: str = "all") -> ScoreSummary:
    """Place the scored pairs back at their input rows, measure detection against ``noisy_gt``
    when the input has it, write the output (``write``: ``all`` or ``scores``,
    :func:`ncclean.data.results.write_results`) and its sidecar, save the matcher; the
    summary."""
    import numpy as np

    from ncclean.data.results import NOISY, PairResults, partition_counts, write_results
    from ncclean.data.schema import NOISY_GT
    from ncclean.models.checkpoint import save_matcher as save_checkpoint

    rows = features.rows
    detection = None
    if NOISY_GT in corpus.source.schema.names:  # injected noise: say how well it was found
        from ncclean.evaluate.detection import detection_metrics

        truth = np.array(corpus.source.read_columns([NOISY_GT]).column(0).to_pylist(),
                         dtype=bool)[rows]
        detection = detection_metrics(truth, clean_prob, flagged=parts == NOISY).as_dict()

    writing = time.perf_counter()

    def written_in() -> None:  # before the record's copy is written: it holds these too
        seconds["write"] = time.perf_counter() - writing
        seconds["total"] = time.perf_counter() - began

    results = PairResults.from_pairs(
        corpus.n_pairs, rows, clean_prob, parts, stages.significance, stages.donor,
        stages.donor_score, result.columns)
    written = write_results(corpus, out, results, sidecar | {
        "estimated_noise_rate": result.noise_rate,
        "estimated_noise_ci95": result.noise_ci95,
        "detection_vs_noisy_gt": detection,
        "stages": stages.report,
        "report": result.report,
        "seconds": seconds,
    }, write, before_copy=written_in)
    if save_matcher is not None and result.matcher is not None:
        save_checkpoint(save_matcher, result.matcher, {"method": sidecar["method"],
                                                       "seed": sidecar["seed"],
                                                       "trained_on": sidecar["input"]})
    donor_row = results.pseudo_caption_row
    return ScoreSummary(
        input=Path(sidecar["input"]), output=written, method=sidecar["method"],
        device=sidecar["device"], n_pairs=corpus.n_pairs, n_invalid=corpus.n_invalid,
        partition_counts=partition_counts(results.partition), noise_rate=result.noise_rate,
        noise_interval=result.noise_ci95, seconds=seconds, detection=detection,
        n_pseudo_captions=0 if donor_row is None else int((donor_row >= 0).sum()))
