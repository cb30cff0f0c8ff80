"""What a sharded scoring run checks before any work, so that a bad request costs a second, not
a fit: the shards are readable and agree on their columns, the output folder can be written
and is not inside the input, a ``--save-fit`` folder can be written, and the options a saved
fit fixes were not given otherwise (``docs/scaling.md``, "Apply a saved fit").
"""

from __future__ import annotations

import os
from pathlib import Path

from ncclean.data.scored import FOLDER_RECORD
from ncclean.data.shards import InputShard
from ncclean.errors import BadOptionError, FitError, OutputError

PathLike = str | os.PathLike


def check_shards(input: PathLike, shards: list[InputShard]) -> None:
    """Every Parquet shard of ``input`` readable and of one schema (:func:`open_pairs` raises
    :class:`~ncclean.errors.NotParquetError` or :class:`~ncclean.errors.SchemaError` naming the
    file); other kinds are checked as they are read."""
    from ncclean.data.parquet import open_pairs

    if all(s.kind == "parquet" for s in shards):
        open_pairs(input)


def check_output(input: PathLike, out: Path, to_folder: bool,
                 shards: list[InputShard] = (), overwrite: bool = False) -> None:
    """The output of a sharded run: not the input nor inside the input folder, not a file where
    a folder is asked for (``-o DIR/``), created (remembered, so a failed run removes it) and
    writable; in a folder, no output shard (``DIR/<stem>.parquet`` for each of ``shards``) may
    be an input file, nor replace a file that is not a scored shard unless ``overwrite``.
    :class:`OutputError` otherwise, before any work."""
    from ncclean.data.atomic import make_folder, probe_writable
    from ncclean.data.parquet import check_output_path

    source = Path(input).resolve()
    target = out.resolve()
    if target == source or (source.is_dir() and source in target.parents):
        raise OutputError(f"{out} lies inside the input {input}: the next run would read its "
                          "own output as input; write it elsewhere")
    if to_folder:
        if out.exists() and not out.is_dir():
            raise OutputError(f"-o {out}: a file is in the way (a corpus of shards is written "
                              "to a folder); give a new folder name")
        _check_shard_outputs(out, shards, overwrite)
        make_folder(out)
        probe_writable(out / FOLDER_RECORD)
    else:
        check_output_path(out)  # a file: not a folder, its folder made and probed


def _check_shard_outputs(out: Path, shards: list[InputShard], overwrite: bool) -> None:
    """Each output shard of a folder run: never an input file (a single file scored into its
    own folder), and where a file is already there, one a scoring run wrote (a rerun resumes or
    redoes it), unless ``overwrite``."""
    from ncclean.data.shards import scored_shard

    inputs = {shard.path.resolve() for shard in shards}
    for shard in shards:
        dest = out / f"{shard.stem}.parquet"
        if dest.resolve() in inputs:
            raise OutputError(f"-o {out}: its output shard {dest} would replace the input "
                              f"{shard.path}; write to another folder")
        if dest.exists() and not overwrite and not scored_shard(dest):
            raise OutputError(f"-o {out}: {dest} exists and was not written by a scoring run; "
                              "give a new folder, or --overwrite to replace it")


def check_save_fit(path: PathLike | None) -> None:
    """A ``--save-fit`` folder that can be written (created now, remembered)."""
    if path is None:
        return
    from ncclean.data.atomic import make_folder, probe_writable

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise BadOptionError(f"--save-fit {folder}: a file is in the way (a fit is a folder)")
    make_folder(folder)
    probe_writable(folder / "fit.json")


def check_fit_options(meta: dict, fit_path: PathLike, method: str, params: dict | None, cut,
                      stages, run, given: frozenset[str] = frozenset()) -> None:
    """:class:`FitError` when an option a saved fit fixes (the method, its parameters, the seed,
    the cut, the stages) was given with a value other than the fit's. An option counts as given
    when it differs from its default or is named in ``given`` (the command line's explicit
    options, so that ``--seed 0`` against a fit of seed 3 is refused too)."""
    from ncclean.options import AUTO_METHOD, DEFAULT_CUT, RunOptions, StageOptions

    def refuse(option: str, value, fitted) -> None:
        raise FitError(f"{option} {value} differs from the fit's {fitted} (--fit {fit_path} "
                       "fixes it); leave it out, or fit again with it")

    if method != AUTO_METHOD and method != meta["method"]:
        refuse("--method", method, meta["method"])
    for name, value in (params or {}).items():
        fitted = meta["params"].get(name)
        if fitted is None or not _same(fitted, value):
            refuse(f"-p {name}=", value, fitted)
    if (run.seed != RunOptions().seed or "seed" in given) and run.seed != meta["seed"]:
        refuse("--seed", run.seed, meta["seed"])
    fitted_cut = meta["cut"]
    for name in ("clean_above", "noisy_below", "noise_rate", "rare_clean_above", "rare_count",
                 "noisy_recall", "review_recall", "queue_by_estimate", "preset"):
        value = getattr(cut, name)
        # a fit from before the queue was sized by the estimate cut by its thresholds
        fitted = fitted_cut.get(name, False if name == "queue_by_estimate" else None)
        if (value != getattr(DEFAULT_CUT, name) or name in given) and value != fitted:
            typed = sorted({"clean_above", "noisy_below"} & given)
            if name == "queue_by_estimate" and name not in given and typed:
                if all(getattr(cut, t) == fitted_cut.get(t) for t in typed):
                    continue  # the fit's own thresholds restated: its cut, queue and all
                raise FitError(f"--{typed[0].replace('_', '-')} turns the queue by the noise "
                               f"estimate off, which the fit at {fit_path} keeps on; leave it "
                               "out (the fit fixes the cut), or give --queue-by-estimate too")
            refuse(f"--{name.replace('_', '-')}", value, fitted)
    fitted_donors = meta.get("donors") or "clean"  # a fit from before the option: clean
    if (stages.donors != StageOptions().donors or "donors" in given) \
            and stages.donors != fitted_donors:
        refuse("--donors", stages.donors, fitted_donors)
    if stages != StageOptions():
        if stages.pseudo_captions != meta.get("pseudo_captions", stages.pseudo_captions):
            refuse("--pseudo-captions", stages.pseudo_captions, meta.get("pseudo_captions"))
        if stages.significance not in (None, meta.get("significance")):
            refuse("--significance", stages.significance, meta.get("significance"))


def _same(fitted, given) -> bool:
    """A parameter's fitted value and one given as text (``-p lr=2e-4``) are the same."""
    if str(fitted) == str(given):
        return True
    try:
        return float(fitted) == float(given)
    except (TypeError, ValueError):
        return False


def check_fit_columns(meta: dict, columns, fit_path: PathLike) -> None:
    """:class:`FitError` when ``--image-emb-col``/``--text-emb-col`` name other columns than the
    fit read."""
    fitted = meta["columns"]
    for flag, name in (("--image-emb-col", "image_emb"), ("--text-emb-col", "text_emb")):
        value = getattr(columns, name)
        if value is not None and fitted.get(name) is not None and value != fitted[name]:
            raise FitError(f"{flag} {value}: the fit at {fit_path} read the column "
                           f"{fitted[name]!r}; name that column (a fit's vectors are its own)")
