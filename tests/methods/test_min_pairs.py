"""Each method declares the smallest corpus it was measured to rank well on; below it ``score``
warns in one line, and ``ncclean methods NAME`` says so."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean import api
from ncclean.data.schema import Columns
from ncclean.methods.base import get_method
from ncclean.methods.unit import unit_rows
from ncclean.options import ScaleOptions
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
    pq.write_table(vector_table(150, text_width=12), tmp_path / "in.parquet")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "clip.parquet", "clip",
                        columns=Columns(image_emb="img", text_emb="txt"), cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("150 pairs is below the 200 that clip"), said
    assert said[0].endswith("score them inside a larger corpus of their kind, or review them all")


def test_in_one_fixed_space_clip_ranks_alike_at_any_size_and_does_not_warn(tmp_path):
    """Columns of one width are read as one space (a CLIP's vectors): no CCA is fitted, so a
    pair's rank among any of its corpus's pairs is the same whether they were scored alone or
    inside the larger corpus."""
    table = vector_table(400, noise=0.4, seed=2)
    columns = Columns(image_emb="img", text_emb="txt")
    pq.write_table(table, tmp_path / "all.parquet")
    pq.write_table(table.slice(0, 120), tmp_path / "few.parquet")
    every = api.score(tmp_path / "all.parquet", tmp_path / "all-out.parquet", "clip",
                      columns=columns, cache_dir=False)
    few = api.score(tmp_path / "few.parquet", tmp_path / "few-out.parquet", "clip",
                    columns=columns, cache_dir=False)
    assert not [w for w in every.warnings + few.warnings if "was measured to need" in w]
    inside = pq.read_table(tmp_path / "all-out.parquet").slice(0, 120)
    alone = pq.read_table(tmp_path / "few-out.parquet")
    assert inside.column("clip_sim").equals(alone.column("clip_sim"))
    for scored in (inside, alone):  # clean_prob ranks as the cosine does
        order = np.argsort(scored.column("clip_sim").to_numpy(), kind="stable")
        assert (np.diff(scored.column("clean_prob").to_numpy()[order]) >= 0).all()


def test_clip_from_scratch_has_the_scratch_minimum_and_points_at_the_pretrained_towers(tmp_path):
    api.synth(tmp_path / "in.parquet", n_images=20, captions_per_image=2, seed=0)
    summary = api.score(tmp_path / "in.parquet", tmp_path / "out.parquet", "clip",
                        {"warmup_epochs": 1}, embed_dim=16, image_size=16, cache_dir=False)
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("40 pairs is below the 1,200 that clip"), said
    assert "pip install 'ncclean[imagenet,e5]'" in said[0]


def test_a_fit_sample_below_the_minimum_is_told_to_grow_and_the_fit_keeps_saying_so(tmp_path):
    pq.write_table(vector_table(400, text_width=12), tmp_path / "in.parquet")
    columns = Columns(image_emb="img", text_emb="txt")
    summary = api.score(tmp_path / "in.parquet", tmp_path / "out", "clip", columns=columns,
                        cache_dir=False, scale=ScaleOptions(fit_sample=150,
                                                            save_fit=tmp_path / "fit"))
    said = [w for w in summary.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].startswith("150 pairs is below the 200 that clip"), said
    assert said[0].endswith("fit on a larger sample of the corpus's 400 rows (--fit-sample)")
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    assert record["warnings"] == summary.warnings
    applied = api.score(tmp_path / "in.parquet", tmp_path / "applied", "clip", columns=columns,
                        cache_dir=False, scale=ScaleOptions(fit=tmp_path / "fit"))
    assert applied.warnings[0] == f"the saved fit {tmp_path / 'fit'}: {said[0]}"
    assert applied.warnings[1].startswith("the estimated noise rate is the saved fit's")
    assert len(applied.warnings) == 2
    # a sample of a corpus whose valid pairs (150 of 400 rows) are fewer than the minimum
    table = vector_table(400, text_width=12)
    texts = [None if k % 8 < 5 else v for k, v in enumerate(table.column("txt").to_pylist())]
    pq.write_table(table.set_column(table.schema.get_field_index("txt"), "txt",
                                    pa.array(texts, pa.list_(pa.float32()))),
                   tmp_path / "holes.parquet")
    holes = api.score(tmp_path / "holes.parquet", tmp_path / "holes", "clip", columns=columns,
                      cache_dir=False, scale=ScaleOptions(fit_sample=300))
    said = [w for w in holes.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].endswith("or review them all"), said
    # every pair in the fit: the corpus itself is what is small
    pq.write_table(vector_table(150, text_width=12), tmp_path / "few.parquet")
    whole = api.score(tmp_path / "few.parquet", tmp_path / "few", "clip", columns=columns,
                      cache_dir=False, scale=ScaleOptions(fit_sample=150,
                                                          save_fit=tmp_path / "fit-few"))
    said = [w for w in whole.warnings if "was measured to need" in w]
    assert len(said) == 1 and said[0].endswith("score them inside a larger corpus of their kind, "
                                               "or review them all"), said


def test_a_near_unit_vector_is_read_alike_whatever_the_other_rows():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(6, 8)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[:3] *= np.float32(1.005)  # within the tolerance of unit length
    alone = unit_rows(rows[:3])
    with_a_long_row = unit_rows(np.vstack([rows[:3], 3 * rows[3:]]))
    assert alone is rows[:3] or (alone == rows[:3]).all()
    assert (with_a_long_row[:3] == rows[:3]).all()
    assert np.allclose(np.linalg.norm(with_a_long_row[3:], axis=1), 1, atol=1e-6)
