"""Caption vectors centred per writing system, before ``clip``'s CCA.

A multilingual encoder (e5) places each language's captions around a mean of its own. In a
corpus that mixes languages the CCA then spends directions on which language a caption is in,
and a caption's nearest captions are those of its own language: the same pairs rank worse mixed
than each language alone. Each writing system's captions (:mod:`ncclean.data.scripts`, no
language label needed) are shifted so that their mean is the corpus's: a caption vector ``t`` of
system ``s`` becomes ``t - mean_s + mean``, both means over the fitted pairs. A system with fewer
than :data:`MIN_PAIRS` pairs, and captions without letters, keep their vectors; a corpus with
fewer than two systems of that size is left as it is (``benchmarks/results/languages.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ncclean.data.scripts import NAMES, OTHER

#: Pairs a writing system needs before its captions get a mean of their own.
MIN_PAIRS = 20
_BLOCK = 16_384


@dataclass(frozen=True)
class ScriptCentring:
    """The shift of each centred writing system: ``codes`` ``(g,) int8`` and ``shifts``
    ``(g, d) float32`` (the corpus's mean less the system's), with ``pairs`` per system."""

    codes: np.ndarray
    shifts: np.ndarray
    pairs: tuple[int, ...] = ()

    def apply(self, features):
        """``features`` with every caption vector of a centred system shifted (a copy of the
        caption table; the pairs and the image table shared)."""
        if features.text_script is None:
            raise ValueError("these features do not say their captions' writing systems")
        by_code = np.zeros((len(NAMES), self.shifts.shape[1]), np.float32)
        by_code[self.codes] = self.shifts
        texts = np.empty_like(features.text_data)
        for start in range(0, len(texts), _BLOCK):
            rows = slice(start, start + _BLOCK)
            np.add(features.text_data[rows], by_code[features.text_script[rows]],
                   out=texts[rows], casting="unsafe")  # float16 vectors stay float16
        return replace(features, text_data=texts)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a saved fit keeps to centre new pairs (:meth:`from_arrays`)."""
        return {"scripts.codes": self.codes, "scripts.shifts": self.shifts,
                "scripts.pairs": np.asarray(self.pairs, np.int64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> ScriptCentring | None:
        if "scripts.codes" not in arrays:
            return None
        return cls(np.asarray(arrays["scripts.codes"], np.int8),
                   np.asarray(arrays["scripts.shifts"], np.float32),
                   tuple(int(p) for p in arrays["scripts.pairs"]))

    def describe(self) -> dict:
        """For the run record: the systems centred, with their pairs."""
        return {"centred": {NAMES[int(code)]: pairs
                            for code, pairs in zip(self.codes, self.pairs, strict=True)},
                "min_pairs": MIN_PAIRS}


def fit_centring(features) -> ScriptCentring | None:
    """The centring of ``features``' caption vectors (pair-weighted means), or ``None`` where
    their writing systems are unknown or fewer than two have :data:`MIN_PAIRS` pairs."""
    if features.text_script is None or features.n_pairs == 0:
        return None
    pairs = np.bincount(features.text_group, minlength=len(features.text_data))
    script = features.text_script
    by_code = np.bincount(script, weights=pairs, minlength=len(NAMES)).astype(np.int64)
    codes = np.flatnonzero(by_code)
    counts = by_code[codes]
    kept = (codes != OTHER) & (counts >= MIN_PAIRS)
    if kept.sum() < 2:
        return None
    sums = np.zeros((len(codes), features.text_data.shape[1]))
    for start in range(0, len(script), _BLOCK):  # a block of entries at a time in float64
        rows = slice(start, start + _BLOCK)
        block, weights = np.asarray(features.text_data[rows], np.float64), pairs[rows]
        for k, code in enumerate(codes):  # entries in no pair left out (theirs may be NaN)
            used = (script[rows] == code) & (weights > 0)
            sums[k] += weights[used] @ block[used]
    mean = sums.sum(axis=0) / features.n_pairs
    shifts = mean - sums[kept] / counts[kept, None]
    return ScriptCentring(codes[kept].astype(np.int8), shifts.astype(np.float32),
                          tuple(int(c) for c in counts[kept]))
