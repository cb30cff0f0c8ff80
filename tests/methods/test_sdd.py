import numpy as np
import pyarrow.parquet as pq
import torch

from ncclean import api
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.base import Context
from ncclean.methods.mixture import fit_clean_posterior
from ncclean.methods.sdd import SDD, rescore
from ncclean.testing import check_method, tiny_features
from ncclean.train.scoring import Embeddings


def test_passes_the_conformance_suite():
    result = check_method(SDD(epochs=2, warmup_epochs=6, batch_size=16, lr=3e-3, warmup_lr=3e-3),
                          pairs=200)
    assert set(result.columns) == {"sdd_sim", "sdd_w_con", "sdd_w_sig"}
    assert set(np.unique(result.partition)) <= {"noisy", "vague", "clean_significant"}
    assert result.significance == "update"
    w_sig = result.columns["sdd_w_sig"]
    seen = np.isfinite(w_sig)
    assert seen.any() and (w_sig[seen] > np.tanh(0) - 1e-9).all() and (w_sig[seen] <= 1).all()


def test_auto_thresholds_drop_below_the_mixture_boundary_and_bank_above_the_clean_mean():
    rng = np.random.default_rng(0)
    cos = np.concatenate([rng.normal(0.1, 0.03, 300), rng.normal(0.3, 0.03, 700)])
    images = np.stack([np.ones_like(cos), np.zeros_like(cos)], 1).astype(np.float32)
    texts = np.stack([cos, np.sqrt(1 - cos**2)], 1).astype(np.float32)
    features, _, _ = tiny_features(n_images=4)
    features.image_group, features.text_group = np.arange(1000), np.arange(1000)
    features.rows = np.arange(1000)
    scores = rescore(Embeddings(images, texts), features, 100.0, None, None, seed=0)
    w_con, _ = fit_clean_posterior(100 * cos, "high", seed=0)
    assert np.array_equal(scores.kept, w_con >= 0.5)
    assert 15 < scores.alpha < 25 and 28 < scores.beta < 32
    fixed = rescore(Embeddings(images, texts), features, 100.0, 20.0, 30.0, seed=0)
    assert np.array_equal(fixed.kept, 100 * cos > 20) and fixed.beta == 30.0


def test_finds_injected_noise_and_writes_four_partitions(tmp_path):
    features, config, truth = tiny_features(n_images=60, captions_per_image=3, noise=0.4)
    result = SDD(epochs=2, warmup_epochs=6, batch_size=32, warmup_lr=5e-4).fit(
        features, Context(seed=0, matcher_config=config))
    assert detection_metrics(truth[features.rows], result.clean_prob).auroc > 0.75

    clean, corpus = tmp_path / "clean.parquet", tmp_path / "noisy.parquet"
    api.synth(clean, n_images=40, captions_per_image=3, seed=0)
    api.inject_noise(clean, corpus, ratio=0.4, seed=0)
    out = tmp_path / "scored.parquet"
    params = {"epochs": 1, "warmup_epochs": 2, "batch_size": 32}
    api.score(corpus, out, method="sdd", params=params, seed=0, cache_dir=False,
              significance_passes=1)
    table = pq.read_table(out).to_pydict()
    assert {"sdd_sim", "sdd_w_con", "sdd_w_sig", "significance"} <= set(table)
    parts = np.array(table["partition"])
    assert set(parts) <= {"noisy", "vague", "clean_significant", "clean_insignificant",
                          "invalid"}
    assert (parts == "noisy").any() and np.isin(parts, ["clean_significant",
                                                        "clean_insignificant"]).any()
    again = tmp_path / "again.parquet"
    api.score(corpus, again, method="sdd", params=params, seed=0, cache_dir=False,
              significance_passes=1)
    assert pq.read_table(out).equals(pq.read_table(again))


def test_training_loss_is_eq_12_with_eq_2s_infonce_not_halved():
    from ncclean.methods.sdd import SelfDropDualWeight
    from ncclean.models.matcher import build_matcher
    from ncclean.train.losses import contrastive_ce, negative_mask

    features, config, _ = tiny_features(n_images=10)
    model = build_matcher(config, seed=0).eval()  # eval: the same similarities every call
    objective = SelfDropDualWeight(features, SDD(alpha=-1e9, beta=-1e9), "cpu", 0)
    objective.begin_epoch(model, 0)
    pairs = np.arange(8)
    loss = objective.loss(model, pairs, 0)
    c = torch.as_tensor(objective.c[pairs], dtype=torch.float32)
    w_sig = torch.where(c < 1, torch.tanh(c), torch.ones_like(c))
    w_con = torch.as_tensor(objective.scores.w_con[pairs], dtype=torch.float32)
    batch = features.batch(pairs)
    with torch.no_grad():
        i2t, t2i = contrastive_ce(model.batch_similarity(batch),
                                  negative_mask(batch.image_group, batch.text_group), 0.05)
    assert torch.allclose(loss.detach(), (w_con * w_sig * (i2t + t2i)).mean())
