"""A fit: what scoring learns from a sample of the corpus, kept so any pair can be scored later.

A fit is a folder: ``fit.json`` (method, parameters, seed, columns, the matcher's configuration,
the resolved cut, the stages' options, the sample's size and content hash) and
``fit.safetensors`` (arrays), plus ``matcher.safetensors`` when the method trained one. Its
arrays hold:

- the pairs of the fit sample, each by a key of its id and its content (:func:`sample_keys`:
  its image and caption vectors and its caption text), with their one-pass results (clean
  probability, partition, significance, pseudo-caption, the method's columns): a pair the fit
  was trained on is written exactly as one pass writes it, and a pair whose vectors or caption
  differ, whatever its id, is scored from its content (a ``gmm`` fit sampled
  from a larger corpus: its clean probability on the held-out scale, see
  :func:`ncclean.pipeline.keep.rescale_sample`, the one pass's kept as ``sample.one_pass_prob``);
- the map from the method's per-pair signal to ``clean_prob`` (a monotone table read by linear
  interpolation: the null's or the mixture's reading of the sample, see :mod:`.apply`), and the
  CCA alignment when ``clip`` fitted one;
- the reference sets the stages search: the significance pool's images and the pseudo-caption
  donors' captions (vectors, identities, texts and ids), the fixed negative pool of ``gmm``;
- the caption counts of the sample (the cut's rare captions).

The fit's hash (:attr:`Fit.hash`) is the SHA-256 of every file it holds (the matcher's
included): output shards record it, so a rerun with another fit redoes them. :func:`load_fit`
refuses, in one line, a folder that is not a whole fit of this format.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ncclean.errors import BadOptionError, FitError

FORMAT = "ncclean-fit/4"  # /4: clip's neighbours may weigh a prior space (/3 never does)
#: Formats that key the sample pairs by id and content and list their arrays (/1, /2: by id).
KEYED = ("ncclean-fit/3", FORMAT)
READS = ("ncclean-fit/1", "ncclean-fit/2", *KEYED)  # older: no bands (/1); no sample lookup
JSON_NAME, ARRAYS_NAME, MATCHER_NAME = "fit.json", "fit.safetensors", "matcher.safetensors"


@dataclass
class Fit:
    """A fit in memory: ``meta`` (JSON-ready), ``arrays`` (name -> numpy array), the trained
    ``matcher`` (or ``None``) and ``hash`` (set when saved or loaded)."""

    meta: dict
    arrays: dict[str, np.ndarray]
    matcher: object = None
    hash: str = ""
    strings: dict[str, list[str]] = field(default_factory=dict)

    def text(self, name: str) -> list[str]:
        """A list of strings stored as ``name.bytes`` (utf-8) and ``name.ends``."""
        if name not in self.strings:
            blob = self.arrays[f"{name}.bytes"].tobytes()
            ends = self.arrays[f"{name}.ends"]
            starts = np.r_[0, ends[:-1]]
            self.strings[name] = [blob[a:b].decode() for a, b in zip(starts, ends, strict=True)]
        return self.strings[name]


def check_towers_apply(config) -> None:
    """:class:`BadOptionError` (one line) unless a fit with the matcher configuration ``config``
    can be applied shard by shard: its towers read precomputed vector columns (a sharded run
    without them embeds each shard first, :mod:`ncclean.pipeline.vectors`)."""
    from ncclean.models.registry import reads_columns

    if config is not None and not reads_columns(config):
        raise BadOptionError("a fit on a sample needs precomputed vectors for now "
                             "(--image-emb-col and --text-emb-col)")


def put_text(arrays: dict[str, np.ndarray], name: str, values: list[str]) -> None:
    """Store ``values`` as ``name.bytes`` and ``name.ends`` (see :meth:`Fit.text`)."""
    encoded = [v.encode() for v in values]
    arrays[f"{name}.bytes"] = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8).copy()
    arrays[f"{name}.ends"] = np.cumsum([len(e) for e in encoded], dtype=np.int64)


def save_fit(fit: Fit, path: str | os.PathLike) -> str:
    """Write ``fit`` to the folder ``path`` (created); returns its hash."""
    from safetensors.numpy import save_file

    from ncclean.data.parquet import atomic_path, write_json

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise BadOptionError(f"--save-fit {folder}: a file is in the way (a fit is a folder)")
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {name: np.ascontiguousarray(value) for name, value in sorted(fit.arrays.items())}
    with atomic_path(folder / ARRAYS_NAME) as tmp:
        save_file(arrays, str(tmp), metadata={"format": FORMAT})
    # the fit says what it holds, so that a reader checks it whole without knowing the method
    fit.meta |= {"arrays": sorted(arrays), "matcher_file": fit.matcher is not None}
    write_json(folder / JSON_NAME, fit.meta)
    if fit.matcher is not None:
        from ncclean.models.checkpoint import save_matcher

        save_matcher(folder / MATCHER_NAME, fit.matcher, {"fit": True})
    fit.hash = fit_hash(folder)
    return fit.hash


def fit_hash(folder: Path) -> str:
    """SHA-256 of a fit's files (hex): its JSON, its arrays and its matcher when it has one."""
    digest = hashlib.sha256()
    for name in (JSON_NAME, ARRAYS_NAME, MATCHER_NAME):
        if name == MATCHER_NAME and not (folder / name).exists():
            continue
        digest.update(name.encode() + b"\0")
        with open(folder / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def load_fit(path: str | os.PathLike, device: str = "cpu") -> Fit:
    """Read a fit written by :func:`save_fit`; :class:`FitError` (one line) when it is not
    one."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = Path(path)
    if not (folder / JSON_NAME).exists() or not (folder / ARRAYS_NAME).exists():
        raise FitError(f"--fit {folder}: no fit there (need {JSON_NAME} and {ARRAYS_NAME}; "
                       "write one with score --save-fit)")
    try:
        meta = json.loads((folder / JSON_NAME).read_text())
        arrays = load_file(str(folder / ARRAYS_NAME))
    except (json.JSONDecodeError, SafetensorError, OSError, UnicodeDecodeError) as error:
        raise FitError(f"--fit {folder}: cannot read it ({_one_line(error)})") from None
    if not isinstance(meta, dict):
        raise FitError(f"--fit {folder}: {JSON_NAME} holds {type(meta).__name__}, not a fit's "
                       "record; write a fit with score --save-fit")
    if meta.get("format") not in READS:
        raise FitError(f"--fit {folder}: format {meta.get('format')!r}, expected "
                       f"{' or '.join(map(repr, READS))}; refit with score --save-fit")
    _check_whole(folder, meta, arrays)
    matcher = None
    if (folder / MATCHER_NAME).exists():
        from ncclean.errors import CheckpointError
        from ncclean.models.checkpoint import load_matcher

        try:
            matcher = load_matcher(folder / MATCHER_NAME, device)
        except CheckpointError as error:
            raise FitError(f"--fit {folder}: {error}") from None
    return Fit(meta=meta, arrays=arrays, matcher=matcher, hash=fit_hash(folder))


_META = {"method": str, "params": dict, "seed": int, "columns": dict, "widths": list,
         "matcher": dict, "cut": dict, "columns_out": dict, "sample": dict}
_EVERY_FORMAT = ("sample.key", "sample.clean_prob", "sample.partition", "sample.significance",
                 "sample.donor", "table.x", "table.y", "captions.key", "captions.count")
"""The arrays a fit of any format holds; one of this format lists its own (``arrays``)."""


def _check_whole(folder: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """:class:`FitError` naming what is missing or inconsistent in a fit read from ``folder``:
    a record entry, an array it lists (older formats: those every fit holds) or its method
    declares, the sample's arrays of unequal lengths, a method that cannot be applied, the
    matcher it was saved with or its method needs."""
    where = f"--fit {folder}"
    expected = dict(_META) | ({"arrays": list, "matcher_file": bool}
                              if meta.get("format") in KEYED else {})
    for key, kind in expected.items():
        if not isinstance(meta.get(key), kind):
            raise FitError(f"{where}: {JSON_NAME} lacks a valid {key!r}; the fit is damaged "
                           "(write it again with score --save-fit)")
    method = meta["method"]
    from ncclean.errors import UnknownMethodError
    from ncclean.methods.base import get_method

    try:  # what a fit of it must hold, as the method's application declares
        application = get_method(method).application
    except UnknownMethodError as error:
        raise FitError(f"{where}: {error}") from None
    wanted = tuple(dict.fromkeys((*meta.get("arrays", _EVERY_FORMAT), *application.arrays,
                                  *(f"column.{c}" for c in meta["columns_out"]))))
    missing = [name for name in wanted if name not in arrays]
    if missing:
        raise FitError(f"{where}: {ARRAYS_NAME} lacks {missing[0]!r}; the fit is damaged "
                       "(write it again with score --save-fit)")
    n = len(arrays["sample.key"])
    uneven = [name for name in wanted if name.startswith(("sample.", "column."))
              and len(arrays[name]) != n]
    if uneven or len(arrays["table.x"]) != len(arrays["table.y"]):
        name = uneven[0] if uneven else "table.y"
        raise FitError(f"{where}: {ARRAYS_NAME}'s {name!r} has {len(arrays[name])} entries "
                       f"where the sample has {n}; the fit is damaged")
    if (application.needs_matcher or meta.get("matcher_file")) and \
            not (folder / MATCHER_NAME).exists():
        raise FitError(f"{where}: a {method} fit needs its {MATCHER_NAME}, which is missing; "
                       "copy the whole fit folder")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def sample_keys(corpus, features) -> np.ndarray:
    """``(features.n_pairs,) uint64``: the key a fit holds each pair of ``corpus`` under: a hash
    of the pair's id, its own image and caption vectors (the corpus's rows, before any grouping)
    and its caption text. A pair of another corpus matches a sample pair only when all of these
    are equal, so a saved fit applied elsewhere scores every other pair from its content."""
    from ncclean.data.shards import pair_keys, text_keys, vector_keys

    rows = features.rows
    ids = corpus.ids.to_pylist()
    images = corpus.image_emb[rows] if corpus.image_emb is not None else \
        features.image_data[features.image_group]
    texts = corpus.text_emb[rows] if corpus.text_emb is not None else \
        features.text_data[features.text_group]
    parts = (pair_keys([ids[r] for r in rows]), vector_keys(images), vector_keys(texts),
             text_keys([corpus.captions[r] for r in rows]))
    key = np.zeros(len(rows), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k, part in enumerate(parts):  # a multiply-xorshift mix of the four hashes
            key = (key ^ part.astype(np.uint64)) * np.uint64(_MIX[k])
            key ^= key >> np.uint64(31)
    return key


def sample_positions(fit: Fit, path: str | os.PathLike) -> np.ndarray:
    """``(n_rows,) int64``: for each row of the Parquet file (or folder) ``path``, read with the
    fit's columns, its position among the fit's ``sample.*`` arrays, ``-1`` when it is not a
    pair of the sample (:func:`sample_keys`); for benchmarks and tests that compare the fitted
    and the applied pairs."""
    from dataclasses import replace

    from ncclean.data.corpus import read_corpus
    from ncclean.data.schema import Columns
    from ncclean.models.features import build_features
    from ncclean.models.matcher import MatcherConfig

    named = fit.meta["columns"]
    columns = replace(Columns(), **{k: v for k, v in named.items() if v is not None})
    corpus = read_corpus(path, columns, image_size=None, cache_dir=None)
    features = build_features(corpus, MatcherConfig.from_dict(fit.meta["matcher"]),
                              cache_dir=None)
    from ncclean.data.shards import find_sorted

    positions = np.full(corpus.n_pairs, -1, dtype=np.int64)
    at, found = find_sorted(fit.arrays["sample.key"],
                            sample_keys(corpus, features))
    positions[features.rows[found]] = at[found]
    return positions


_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93)

