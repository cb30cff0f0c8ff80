"""Each method declares the smallest corpus it was measured to rank well on; below it ``score``
warns in one line, and ``ncclean methods NAME`` says so."""

from __future__ import annotations

import pyarrow.parquet as pq

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.methods.base import get_method
from tests.pipeline.corpora import vector_table


def test_below_its_measured_minimum_a_method_warns(tmp_path):
    pq.write_table(vector_table(200), tmp_path / "in.parquet")
    assert get_method("gmm").min_pairs > 200 and get_method("clip").min_pairs == 200
    columns = Columns(image_emb="img", text_emb="txt")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "gmm.parquet", "gmm",
                        {"epochs": 2, "warmup_epochs": 1, "pool_size": 64}, columns=columns,
                        cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("200 pairs is below the 1,200 that gmm")
    assert said[0].endswith("--method clip ranks small corpora best")  # its towers are clip's
    clip = api.score(tmp_path / "in.parquet", tmp_path / "clip.parquet", "clip",
                     columns=columns, cache_dir=False)
    assert not [w for w in clip.warnings if "was measured to need" in w]
    described = api.methods("gmm")[0]
    assert described["min_pairs"] == 1200


def test_on_towers_trained_from_scratch_the_warning_points_at_the_pretrained_towers(tmp_path):
    """There ``--method clip`` would warm up a matcher from scratch too (it ranked the 300-pair
    example below gmm): the advice is the pretrained towers."""
    api.synth(tmp_path / "in.parquet", n_images=20, captions_per_image=2, seed=0)
    summary = api.score(tmp_path / "in.parquet", tmp_path / "out.parquet", "gmm",
                        {"epochs": 1, "warmup_epochs": 1, "pool_size": 16}, embed_dim=16,
                        image_size=16, cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and "pip install 'ncclean[imagenet,e5]'" in said[0], said
    assert "--method clip ranks" not in said[0]


def test_below_clips_own_minimum_the_warning_asks_for_more_pairs(tmp_path):
    pq.write_table(vector_table(150), tmp_path / "in.parquet")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "clip.parquet", "clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("150 pairs is below the 200 that clip"), said
    assert said[0].endswith("score them inside a larger corpus of their kind, or review them all")
