"""``clip``'s average over the CCA's widths: where a corpus is small enough that its pairs are
ranked by fits that did not see them, or its fit has fewer distinct captions or images than the
vectors' summed width (:attr:`~ncclean.methods.cca_rules.CorpusShape.few_entries`),
``clean_prob`` is the mean of four fits' that keep 32, 64, 128 and 256 directions.

On up to a few thousand pairs the width that ranks noise best depends on the corpus and no
signal of the corpus tells which: clip art's example and AppStream's programs want 32-64
directions (up to +0.018 AUROC over 128), Material Design's and Tabler's icons 256 (+0.004 to
+0.005). The mean of the four widths' ``clean_prob`` is within 0.005 of the best width on every
cross-fitted corpus measured, and on six of eight ranked in sample (the best on four), where it
loses up to 0.008 to 256 directions on 1,000 icons' names and 128 directions alone miss on
three, by up to 0.015 (``benchmarks/results/rules.md``, "The width over many seeds" and "The
four widths where a fit is ranked in sample").

Each width is a whole ``clip`` fit (its CCA, discount, neighbours' weights and null); the
widths' CCAs of the same pairs are solved once and cut (:func:`~ncclean.methods.align.
shared_fits`), so the four cost 1.0-1.5 times one on the 300-pair example. Where pairs
are ranked cross-fitted, each width draws its own folds and shuffles (:func:`member_seed`;
``clip``'s ``width_folds``), which averages the cross-fitting over four splits of the pairs:
+0.005 AUROC on 300-pair corpora (24 noisy files, 20 of them higher), at 1.5-2 times the
fit's time, since only the fits of all the pairs are shared then
(``benchmarks/results/rules.md``, "Each width on its own folds"). The result's
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
#: Where each width has its own folds (``clip``'s ``width_folds``), the ``k``-th width fits with
#: the run's seed plus ``k`` times this: its own cross-fitted folds, shuffles and convention
#: folds.
SEED_STEP = 1000


def member_seed(seed: int, k: int, own_folds: bool) -> int:
    """The seed of the ``k``-th width's fit (:data:`SEED_STEP` apart where ``own_folds``)."""
    return seed + SEED_STEP * k if own_folds else seed


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
    hoods = [member.report.get("neighbours", {}) for member in members]
    if any("prior" in hood for hood in hoods):  # each width reads its own weights
        report["widths"]["prior_weights"] = [hood.get("prior") for hood in hoods]
    return replace(
        primary, clean_prob=np.mean([member.clean_prob for member in members], axis=0),
        noise_rate=None if None in rates else float(np.mean(rates)),
        noise_interval=None if None in intervals else
        tuple(float(np.mean(side)) for side in zip(*intervals)),
        report=report, members=tuple(members))
