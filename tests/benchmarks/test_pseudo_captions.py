"""``benchmarks/pseudo_captions.py``: suggestions per noisy pair and their donors' categories."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.pseudo_captions import pseudo_caption_metrics


def test_counts_suggestions_and_compares_donor_categories(tmp_path):
    # three noisy pairs: two with a donor of their own top-level category, one without a donor
    pq.write_table(pa.table({
        "id": ["a", "b", "c", "d", "e", "f"],
        "category": ["animals/birds", "animals", "food/fruit", "food", "animals/cats", "food"],
        "partition": ["noisy", "clean_significant", "noisy", "clean_insignificant", "noisy",
                      "vague"],
        "pseudo_caption_id": ["b", None, "d", None, None, None],
    }), tmp_path / "s.parquet")
    out = pseudo_caption_metrics(str(tmp_path / "s.parquet"))
    assert (out["noisy"], out["with_suggestion"]) == (3, 2)
    assert out["suggested"] == pytest.approx(2 / 3)
    assert out["own_category"] == 1.0
    assert 0.0 <= out["random_clean"] <= 1.0
