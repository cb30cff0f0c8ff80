"""A fit: what scoring learns from a sample of the corpus, kept so any pair can be scored later.

A fit is a folder: ``fit.json`` (method, parameters, seed, columns, the matcher's configuration,
the resolved cut, the stages' options, the sample's size and content hash) and
``fit.safetensors`` (arrays), plus ``matcher.safetensors`` when the method trained one. Its
arrays hold:

- the pairs of the fit sample (by :func:`ncclean.data.shards.pair_keys`) with their one-pass
  results (clean probability, partition, significance, pseudo-caption, the method's columns):
  a pair the fit was trained on is written exactly as one pass writes it (a ``gmm`` fit sampled
  from a larger corpus: its clean probability on the held-out scale, see
  :func:`ncclean.pipeline.keep.rescale_sample`, the one pass's kept as ``sample.one_pass_prob``);
- the map from the method's per-pair signal to ``clean_prob`` (a monotone table read by linear
  interpolation: the null's or the mixture's reading of the sample, see :mod:`.apply`), and the
  CCA alignment when ``clip`` fitted one;
- the reference sets the stages search: the significance pool's images and the pseudo-caption
  donors' captions (vectors, identities, texts and ids), the fixed negative pool of ``gmm``;
- the caption counts of the sample (the cut's rare captions).

The fit's hash (:attr:`Fit.hash`) is the SHA-256 of its two files: output shards record it, so a
rerun with another fit redoes them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ncclean.errors import BadOptionError, FitError

FORMAT = "ncclean-fit/2"  # /2: the cut's recall bands (an older ncclean would ignore them)
READS = ("ncclean-fit/1", FORMAT)  # a /1 fit has no bands: its thresholds as they were
APPLIES = ("clip", "gmm")  # methods that can score a pair they did not train on
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


def check_method_applies(method: str, config) -> None:
    """:class:`BadOptionError` (one line) unless ``method`` can be fitted and applied with the
    matcher configuration ``config``: ``clip`` and ``gmm`` on precomputed vector columns."""
    if method not in APPLIES:
        raise BadOptionError(f"--fit, --save-fit and --fit-sample support the methods "
                             f"{', '.join(APPLIES)} (method {method!r} cannot yet score a pair it "
                             "did not train on)")
    if config is not None and (config.image_tower, config.text_tower) != ("column", "column"):
        raise BadOptionError("--fit, --save-fit and --fit-sample need precomputed vectors "
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
    write_json(folder / JSON_NAME, fit.meta)
    if fit.matcher is not None:
        from ncclean.models.checkpoint import save_matcher

        save_matcher(folder / MATCHER_NAME, fit.matcher, {"fit": True})
    fit.hash = fit_hash(folder)
    return fit.hash


def fit_hash(folder: Path) -> str:
    """SHA-256 of a fit's JSON and arrays (hex)."""
    digest = hashlib.sha256()
    for name in (JSON_NAME, ARRAYS_NAME):
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
    except (json.JSONDecodeError, SafetensorError, OSError) as error:
        raise FitError(f"--fit {folder}: cannot read it ({error})") from None
    if meta.get("format") not in READS:
        raise FitError(f"--fit {folder}: format {meta.get('format')!r}, expected one of "
                       f"{', '.join(map(repr, READS))}")
    matcher = None
    if (folder / MATCHER_NAME).exists():
        from ncclean.models.checkpoint import load_matcher

        matcher = load_matcher(folder / MATCHER_NAME, device)
    return Fit(meta=meta, arrays=arrays, matcher=matcher, hash=fit_hash(folder))


def signal_table(signal: np.ndarray, clean_prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` float64, ``x`` strictly increasing: each distinct ``signal`` value and the mean
    ``clean_prob`` of its pairs, so ``np.interp(s, x, y)`` gives a pair's clean probability."""
    x, inverse = np.unique(np.asarray(signal, dtype=np.float64), return_inverse=True)
    y = np.bincount(inverse, weights=np.asarray(clean_prob, dtype=np.float64)) / \
        np.bincount(inverse)
    return x, y
