"""``benchmarks/rule_variants.py``: the cuts it reads from each run's scores, computed from
:class:`ncclean.api.Cut` in the script, equal ``score``'s own partitions."""

import numpy as np
import pytest

from benchmarks.rule_variants import CONVENTION_COUNT, CUTS, cut_partitions
from ncclean.api import Cut
from ncclean.methods.cca_rules import CONVENTION_COUNT as RULES_CONVENTION_COUNT
from ncclean.stages.partition import partition


def test_convention_count_is_the_rules_own():
    assert CONVENTION_COUNT == RULES_CONVENTION_COUNT


@pytest.mark.parametrize("noisy_recall, review_recall, queue", CUTS[::5])
def test_cut_partitions_equal_the_stage(noisy_recall, review_recall, queue):
    rng = np.random.default_rng(0)
    clean_prob = np.concatenate([rng.beta(8, 2, 700), rng.beta(2, 6, 300)])
    cut = Cut(clean_above=0.8, noisy_below=0.5, noisy_recall=noisy_recall,
              review_recall=review_recall, queue_by_estimate=queue)
    cut = cut.with_recall(clean_prob).with_queue(clean_prob, (0.2, 0.3))
    assert cut_partitions(clean_prob, cut).tolist() == partition(clean_prob, cut).tolist()
    assert cut_partitions(clean_prob, Cut()).tolist() == partition(clean_prob, Cut()).tolist()
