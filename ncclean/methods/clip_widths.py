"""``clip``'s average over the CCA's widths: where a corpus is small enough that its pairs are
ranked by fits that did not see them, ``clean_prob`` is the mean of four fits' that keep 32, 64,
128 and 256 directions.

On a few hundred pairs the width that ranks noise best depends on the corpus and no signal of
the corpus tells which: clip art's example and AppStream's programs want 32-64 directions (up to
+0.018 AUROC over 128), Material Design's and Tabler's icons 256 (+0.004). The mean of the four
widths' ``clean_prob`` is within 0.005 of the best width on every cross-fitted corpus measured,
and loses up to 0.008 to 256 directions where a fit of names is ranked in sample
(``benchmarks/results/rules.md``, "The width over many seeds").

Each width is a whole ``clip`` fit (its CCA, discount, neighbours' weights and null); the
widths' CCAs of the same pairs are solved once and cut (:func:`~ncclean.methods.align.
shared_fits`), so the four cost about 1.6 times one on the 300-pair example. The result's
columns, space, alignment and neighbours are those of :data:`PRIMARY` directions, its noise
estimate and interval the widths' means, and every width is kept so that a saved fit scores new
pairs the same way (:class:`~ncclean.methods.clip_applied.ClipSimilarity`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ncclean.methods.base import MethodResult

WIDTHS = (32, 64, 128, 256)
PRIMARY = 128


def averaged(members: list[MethodResult]) -> MethodResult:
    """One result from the fits of :data:`WIDTHS` directions (``members``, in that order)."""
    primary = members[WIDTHS.index(PRIMARY)]
    if primary.partition is not None:  # no CCA could be fitted: every width says so alike
        return primary
    rates = [member.noise_rate for member in members]
    intervals = [member.noise_interval for member in members]
    report = dict(primary.report)
    report["widths"] = {"averaged": [member.report["alignment"]["dims"] for member in members],
                        "noise_rates": [None if rate is None else round(float(rate), 4)
                                        for rate in rates]}
    return replace(
        primary, clean_prob=np.mean([member.clean_prob for member in members], axis=0),
        noise_rate=None if None in rates else float(np.mean(rates)),
        noise_interval=None if None in intervals else
        tuple(float(np.mean(side)) for side in zip(*intervals)),
        report=report, members=tuple(members))
