"""``benchmarks/selections.py``: the rules that rewrite a clean set with the injected noise."""

import numpy as np
import pytest

from benchmarks.selections import RULES, select

# rows: clean noisy, clean clean (rare), clean clean, dropped clean (rare), dropped clean,
# dropped noisy, invalid
PARTITION = np.array(["clean_significant", "clean_insignificant", "clean_significant", "vague",
                      "noisy", "noisy", "invalid"], dtype=object)
NOISY = np.array([True, False, False, False, False, True, False])
RARE = np.array([True, True, False, True, False, False, False])


@pytest.mark.parametrize("rule, kept", [
    ("minus-noise", [1, 2]),
    ("minus-noise-rare", [1, 2]),
    ("minus-noise-repeated", [0, 1, 2]),
    ("plus-dropped", [0, 1, 2, 3, 4]),
    ("minus-noise-plus-rare", [1, 2, 3]),
    ("minus-noise-plus-repeated", [1, 2, 4]),
])
def test_rules(rule, kept):
    assert rule in RULES
    assert np.flatnonzero(select(PARTITION, NOISY, RARE, rule)).tolist() == kept


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown rule"):
        select(PARTITION, NOISY, RARE, "everything")


def test_caption_counts_count_as_the_cut_does():
    # the script's own count, against the one score's --rare-clean-above uses
    from benchmarks.selections import caption_counts
    from ncclean.data.corpus import text_groups
    from ncclean.stages.partition import caption_counts as cut_counts

    captions = ["A  cat", "a cat ", "a dog", "A DOG", "a\tdog", "bird", "Bird s", ""]
    assert caption_counts(captions).tolist() == cut_counts(text_groups(captions)).tolist()
