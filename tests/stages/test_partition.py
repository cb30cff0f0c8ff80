import numpy as np
import pytest

from ncclean.errors import BadOptionError
from ncclean.stages.partition import Cut, partition


def test_default_cut_is_the_single_half():
    out = partition(np.array([0.9, 0.5, 0.49, 0.0]))
    assert out.tolist() == ["clean_significant", "clean_significant", "noisy", "noisy"]


def test_a_band_makes_vague():
    out = partition(np.array([0.9, 0.6, 0.45, 0.2]), Cut(clean_above=0.7, noisy_below=0.3))
    assert out.tolist() == ["clean_significant", "vague", "vague", "noisy"]


def test_cut_by_noise_rate_takes_the_lowest_share_with_stable_ties():
    prob = np.array([0.5, 0.1, 0.5, 0.9, 0.5])
    out = partition(prob, Cut(noise_rate=0.4))
    assert out.tolist() == ["noisy", "noisy", "clean_significant", "clean_significant",
                            "clean_significant"]


@pytest.mark.parametrize("kwargs", [dict(clean_above=0.3, noisy_below=0.6),
                                    dict(noise_rate=1.5), dict(clean_above=1.2)])
def test_bad_cuts(kwargs):
    with pytest.raises(BadOptionError):
        Cut(**kwargs)
