"""How a plain matcher's per-pair loss separates noisy pairs epoch by epoch (no noise handling).

Trains one matcher with the mean hinge loss (NCR's warm-up) on a noisy corpus and prints, after
every epoch, the detection AUROC of the division loss (fixed pool and fixed batches), of the
pair's cosine, of the GMM posterior, and of the loss averaged over the epochs so far. This is the
memorisation curve behind the ``gmm`` method's choices (augmentation, epoch rule, ``final``).

    python benchmarks/kernels/warmup_curve.py NOISY.parquet --epochs 20 [--no-augment] \\
        [--text-encoder e5]
        [--image-emb-col image_emb]

NOISY.parquet needs a ``noisy_gt`` column (``ncclean inject-noise``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from ncclean.data.cache import default_cache_dir
from ncclean.data.corpus import read_corpus
from ncclean.data.schema import Columns
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.mixture import fit_clean_posterior
from ncclean.models.features import build_features
from ncclean.models.matcher import MatcherConfig, build_matcher
from ncclean.models.tables import build_vocabulary
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import mean_hinge, negative_mask
from ncclean.train.scoring import embed, pair_losses


class Warmup(Objective):
    def __init__(self, features, truth, batch_size):
        self.features, self.truth, self.batch_size = features, truth, batch_size
        self.loss_sum = np.zeros(features.n_pairs)

    def steps(self, epoch, rng):
        order = rng.permutation(self.features.n_pairs)
        return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def loss(self, model, step, epoch):
        batch = self.features.batch(step)
        sims = model.encode_images(*batch.images) @ model.encode_texts(*batch.texts).T
        return mean_hinge(sims, negative_mask(batch.image_group, batch.text_group)).sum()

    def end_epoch(self, model, epoch):
        embeddings = embed(model, self.features)
        pool = pair_losses(embeddings, self.features, negatives="pool")
        batches = pair_losses(embeddings, self.features, negatives="batches")
        posterior, fit = fit_clean_posterior(pool, "low")
        self.loss_sum += pool

        def auroc(clean_score):
            return detection_metrics(self.truth, clean_score).auroc

        report = {"pool": auroc(-pool), "batches": auroc(-batches),
                  "cosine": auroc(embeddings.pair_similarity(self.features)),
                  "posterior": auroc(posterior), "averaged": auroc(-self.loss_sum),
                  "estimated_noise": fit.noise_rate}
        print(f"epoch {epoch + 1:>2}: " + "  ".join(f"{k} {v:.3f}" for k, v in report.items()),
              flush=True)
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("noisy", type=Path)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--no-augment", action="store_true")
    parser.add_argument("--text-encoder", default="tokens", choices=["tokens", "e5"])
    parser.add_argument("--image-emb-col", default=None,
                        help="train a head on this column of precomputed image vectors instead "
                             "of the CNN on pixels")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    column = args.image_emb_col
    corpus = read_corpus(args.noisy, Columns(image_emb=column), image_size=None if column else 64,
                         cache_dir=default_cache_dir())
    valid = corpus.valid
    config = MatcherConfig(text_tower=args.text_encoder, augment=not args.no_augment,
                           image_tower="column" if column else "pixels",
                           image_in_dim=corpus.image_emb.shape[1] if column else None,
                           text_in_dim=384 if args.text_encoder == "e5" else None,
                           vocab=build_vocabulary([c for c, ok in zip(corpus.captions, valid)
                                                   if ok]).tokens)
    features = build_features(corpus, config, cache_dir=default_cache_dir())
    truth = np.array(corpus.source.read_columns(["noisy_gt"]).column(0).to_pylist())[
        features.rows]
    torch.manual_seed(args.seed)
    began = time.perf_counter()
    train(build_matcher(config, args.seed), Warmup(features, truth, 128),
          TrainConfig(epochs=args.epochs, lr=args.lr, seed=args.seed))
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
