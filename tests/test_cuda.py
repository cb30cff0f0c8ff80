"""Every training path on a GPU: each method scores a tiny corpus with ``device="cuda"``, the
same seed writes the same file, and ``retrain`` trains its arms there and evaluates the scoring
run's saved matcher. Skipped where torch sees no CUDA device (CI); run on a GPU machine with
``pytest tests/test_cuda.py``."""

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from ncclean import api
from tests.helpers import retrain_corpus

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

SMALL_MATCHER = dict(embed_dim=32, image_size=32)
PARAMS = {
    "gmm": {"warmup_epochs": "1", "epochs": "2", "batch_size": "32", "pool_size": "64"},
    "pc2": {"warmup_epochs": "1", "epochs": "2", "batch_size": "32", "pool_size": "64"},
    "crcl": {"pieces": "2,2", "freeze_epochs": "1", "batch_size": "32"},
    "sdd": {"warmup_epochs": "2", "epochs": "1", "batch_size": "32"},
    "disncl": {"warmup_epochs": "1", "epochs": "2", "batch_size": "32"},
    "clip": {"warmup_epochs": "2", "batch_size": "32"},  # no pretrained vectors: a warm-up
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return retrain_corpus(tmp_path_factory.mktemp("cuda"))


def _score(corpus, method, name, **options):
    out = corpus / f"{name}.parquet"
    summary = api.score(corpus / "noisy.parquet", out, method=method, params=PARAMS[method],
                        device="cuda", cache_dir=corpus / "cache", clean_above=0.5,
                        **SMALL_MATCHER, **options)
    assert summary.device.startswith("cuda")
    return np.array(pq.read_table(out).column("clean_prob").to_pylist(), dtype=float)


@pytest.mark.parametrize("method", sorted(PARAMS))
def test_method_scores_on_the_gpu_and_repeats_with_the_seed(corpus, method):
    first = _score(corpus, method, f"{method}-a")
    assert len(first) == 90 and np.isfinite(first).all()
    np.testing.assert_array_equal(_score(corpus, method, f"{method}-b"), first)


def test_retrain_arms_train_on_the_gpu(corpus):
    _score(corpus, "gmm", "scored", save_matcher=corpus / "gmm.safetensors")
    runs = [api.retrain(corpus / "scored.parquet", corpus / "test.parquet", baseline=True,
                        steps=12, device="cuda", cache_dir=corpus / "cache",
                        matcher=corpus / "gmm.safetensors")
            for _ in range(2)]
    assert list(runs[0].arms) == ["cleaned", "noisy", "oracle", "matcher"]
    for arm in runs[0].arms:
        assert runs[0].arms[arm]["strict"] == runs[1].arms[arm]["strict"]
        assert runs[0].arms[arm].get("curve") == runs[1].arms[arm].get("curve")
