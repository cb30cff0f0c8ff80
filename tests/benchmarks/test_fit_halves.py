"""``benchmarks/fit_halves.py``: each half's AUROC of a fitted run."""

from benchmarks.fit_halves import halves
from ncclean.api import score
from ncclean.data.schema import Columns
from ncclean.options import ScaleOptions
from tests.pipeline.corpora import vector_table, write_shards


def test_halves_reads_each_half_and_every_scored_column(tmp_path):
    write_shards(vector_table(400, noise=0.4, seed=2), tmp_path / "in", 2)
    score(tmp_path / "in", tmp_path / "out", "clip", columns=Columns(image_emb="img",
          text_emb="txt"), seed=0, cache_dir=False,
          scale=ScaleOptions(fit_sample=200, save_fit=tmp_path / "fit"))
    got = halves(str(tmp_path / "out"), str(tmp_path / "fit"))
    assert [got[h]["n"] for h in ("fitted", "applied", "all")] == [200, 200, 400]
    for half in got.values():
        assert set(half) == {"n", "clean_prob", "clip_sim"}
        assert half["clean_prob"] > 0.9 and half["clip_sim"] > 0.9
