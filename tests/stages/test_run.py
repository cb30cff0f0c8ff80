"""The stages after any method: which significance mode runs, the rare-caption exemption, and
skipping without a matcher or embeddings."""

import numpy as np

import ncclean.stages.significance as significance_module
from ncclean.methods.base import MethodResult
from ncclean.options import StageOptions
from ncclean.stages.run import run_stages, significance_mode
from tests.stages.test_pseudocaption import setup


def test_the_mode_is_the_option_else_the_methods_else_specificity():
    result = MethodResult(clean_prob=np.ones(2), significance="update")
    assert significance_mode(StageOptions(significance="off"), result) == "off"
    assert significance_mode(StageOptions(), result) == "update"
    assert significance_mode(StageOptions(), MethodResult(clean_prob=np.ones(2))) == "specificity"


def test_without_a_matcher_or_embeddings_the_stages_are_skipped():
    parts = np.array(["clean_significant", "noisy"], dtype=object)
    added = run_stages(MethodResult(clean_prob=np.array([0.9, 0.1])), None, np.array([0.9, 0.1]),
                       parts, StageOptions(), rare=np.zeros(2, bool))
    assert added.significance is None and added.donor is None and "skipped" in added.report
    assert list(parts) == ["clean_significant", "noisy"]


def test_specificity_demotes_only_clean_pairs_whose_caption_is_not_rare(monkeypatch):
    embeddings, features = setup()

    def half_specific(matcher, features, clean_prob, clean, config, **kwargs):
        return np.array([0.5, 0.5, 2.0, 0.5]), {"mode": config.mode}

    monkeypatch.setattr(significance_module, "significance", half_specific)
    result = MethodResult(clean_prob=np.array([0.9, 0.9, 0.9, 0.1]), embeddings=embeddings)
    parts = np.array(["clean_significant"] * 3 + ["noisy"], dtype=object)
    added = run_stages(result, features, result.clean_prob, parts,
                       StageOptions(pseudo_captions=False), rare=np.array([True, False, False,
                                                                           False]))
    assert list(parts) == ["clean_significant", "clean_insignificant", "clean_significant",
                           "noisy"]
    assert added.report == {"significance": {"mode": "specificity"}}
    assert added.donor is None


def test_the_update_ratio_demotes_every_clean_pair_below_one_rare_or_not(monkeypatch):
    """SDD's update ratio exempts no rare caption; a mask, not positions (``~False`` is -1)."""
    embeddings, features = setup()

    def update_ratio(matcher, features, clean_prob, clean, config, **kwargs):
        return np.array([2.0, 2.0, 0.5, 0.5]), {"mode": config.mode}

    monkeypatch.setattr(significance_module, "significance", update_ratio)
    result = MethodResult(clean_prob=np.array([0.9, 0.9, 0.9, 0.1]), embeddings=embeddings,
                          matcher=object(), significance="update")  # update needs a matcher
    parts = np.array(["clean_significant"] * 3 + ["noisy"], dtype=object)
    run_stages(result, features, result.clean_prob, parts, StageOptions(pseudo_captions=False),
               rare=np.array([False, False, True, False]))
    assert list(parts) == ["clean_significant", "clean_significant", "clean_insignificant",
                           "noisy"]


def test_significance_update_without_a_matcher_says_it_split_nothing(tmp_path):
    import pyarrow.parquet as pq

    from ncclean import api
    from ncclean.data.schema import Columns
    from tests.pipeline.corpora import vector_table

    pq.write_table(vector_table(200), tmp_path / "in.parquet")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "out.parquet", "clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False,
                        significance="update")
    assert summary.partition_counts["clean_insignificant"] == 0
    assert any(w.startswith("--significance update reads a trained matcher's ratio")
               for w in summary.warnings)
