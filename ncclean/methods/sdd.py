"""``sdd``: Self-Drop and Dual-Weight (Liu et al., arXiv 2412.06172), on any similarity source.

SDD fine-tunes a model whose similarities already mean something (CLIP in the paper). Each epoch
(Algorithm 1) the current model re-scores every pair, ``s = scale * cos`` (``scale`` 100, CLIP's
logit scale), and

- **self-drop** (Eq. 4): pairs with ``s <= alpha`` are noisy and leave the epoch entirely (not
  even as in-batch negatives);
- **confidence weight** (Eq. 5-6): ``w_con`` is the posterior of the higher-mean component of a
  two-component mixture fitted to all ``s`` (the shared :mod:`ncclean.methods.mixture`);
- **significance weight** (Eq. 7-11): for each batch a siamese copy of the model takes one step
  on the batch's ``w_con``-weighted InfoNCE, and the losses of the pairs' memory entries (their
  most similar image and caption among the reliable pairs ``s > beta``, chosen once before
  training) before and after give ``c`` (Eq. 10); ``w_sig = tanh(c)`` when ``c < 1``, else 1
  (:class:`ncclean.train.probe.Probe`, copied from the model before every step as in NPC's code);
- the model trains on ``mean(w_con * w_sig * InfoNCE)`` over the kept pairs (Eq. 12), with
  Eq. 2's InfoNCE ``CE(I, T) + CE(T, I)``.

Partitions follow the paper's four groups after the last re-scoring: dropped -> ``noisy``,
kept with ``w_con < vague_below`` -> ``vague``, the rest clean, split by the significance stage
in ``update`` mode (SDD's ``c``, averaged over shuffled passes) unless ``--significance`` says
otherwise. ``clean_prob`` is ``w_con``, halved for dropped pairs (so they read under 0.5 and keep
their order); ``--clean-above`` / ``--noisy-below`` do not apply.

Where the model comes from: a loaded matcher (``--load-matcher``), or, where no pretrained CLIP
exists, a matcher warmed up on the corpus itself (NCR's warm-up, :mod:`ncclean.train.warmup`),
which SDD then fine-tunes whole. With precomputed embedding columns or a pretrained CLIP the
warmed-up matcher is heads on those frozen features; with ``--finetune full`` SDD starts from the
pretrained CLIP itself and fine-tunes every weight (the paper's setting, meant for a GPU; pass
the paper's ``-p lr=2e-7 -p alpha=20 -p beta=30`` for ViT-B/32). Where this departs from the
paper, and where the authors' code departs from it: :attr:`SDD.departures`
(``ncclean methods sdd``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch

from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.mixture import MixtureFit, fit_clean_posterior
from ncclean.models.features import Features
from ncclean.stages import reference_cap
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import contrastive_ce
from ncclean.train.probe import Probe, confident_pool, memory_entries
from ncclean.train.scoring import Embeddings, embed, kept_dtype
from ncclean.train.warmup import starting_matcher, warmed_matcher

RESULTS = "benchmarks/results/sdd.md"


@dataclass
class Scores:
    """One re-scoring: ``s`` per pair, the mixture, ``w_con``, the thresholds and who is kept."""

    s: np.ndarray
    fit: MixtureFit
    w_con: np.ndarray
    alpha: float
    beta: float
    kept: np.ndarray


def rescore(embeddings: Embeddings, features: Features, scale: float, alpha: float | None,
            beta: float | None, seed: int) -> Scores:
    """``s = scale * cos`` of every pair, the mixture's ``w_con`` and the thresholds (fixed, or
    ``None`` for auto: see the module docstring)."""
    s = scale * embeddings.pair_similarity(features).astype(np.float64)
    w_con, fit = fit_clean_posterior(s, "high", seed=seed)
    if alpha is None:
        confident = s[w_con >= 0.5]
        alpha = float(confident.min()) - 1e-9 if len(confident) else float(np.median(s))
    if beta is None:
        beta = fit.low + fit.clean_mean * (fit.high - fit.low)
    return Scores(s=s, fit=fit, w_con=w_con, alpha=float(alpha), beta=float(beta),
                  kept=s > alpha)


class SelfDropDualWeight(Objective):
    """Algorithm 1 as an :class:`Objective`: re-score, drop and weigh at each epoch's start;
    each step measures ``c`` with the probe, then trains on the dual-weighted InfoNCE."""

    stage = "sdd"

    def __init__(self, features: Features, method: SDD, device: str, seed: int):
        self.features, self.method, self.device, self.seed = features, method, device, seed
        self.scores: Scores | None = None
        self.probe: Probe | None = None
        self.c = np.full(features.n_pairs, np.nan)
        self.entries: tuple[np.ndarray, np.ndarray] | None = None
        self.bank_size = 0
        self.w_con_sum = np.zeros(features.n_pairs)
        self.rescorings = 0

    def begin_epoch(self, model: torch.nn.Module, epoch: int) -> None:
        embeddings = embed(model, self.features, self.device)
        self.scores = rescore(embeddings, self.features, self.method.scale, self.method.alpha,
                              self.method.beta, self.seed)
        self.w_con_sum += self.scores.w_con
        self.rescorings += 1
        if self.entries is None:  # the memory bank, once, from the starting model
            self.entries = self.memory_bank(embeddings)
        if self.probe is None:
            self.probe = Probe(model, self.features, self.entries, self.method.temperature,
                               self.method.probe_step, self.device)

    def memory_bank(self, embeddings: Embeddings) -> tuple[np.ndarray, np.ndarray]:
        """Each pair's entries (Eq. 8): the reliable pair (``s > beta``; the top 10% when too
        few) with the most similar image, and the one with the most similar caption."""
        features, scores = self.features, self.scores
        n = features.n_pairs
        pool = confident_pool(scores.s, np.ones(n, dtype=bool), scores.beta,
                              reference_cap(n), self.seed)
        self.bank_size = len(pool)
        return memory_entries(embeddings, features, pool)

    def steps(self, epoch: int, rng: np.random.Generator) -> list[np.ndarray]:
        image_entry, text_entry = self.probe.image_entry, self.probe.text_entry
        usable = self.scores.kept & (image_entry >= 0) & (text_entry >= 0)
        order = rng.permutation(np.flatnonzero(usable))
        b = self.method.batch_size
        return [order[i:i + b] for i in range(0, len(order), b) if len(order[i:i + b]) > 1]

    def loss(self, model: torch.nn.Module, pairs: np.ndarray, epoch: int) -> torch.Tensor:
        w_con = torch.as_tensor(self.scores.w_con[pairs], dtype=torch.float32,
                                device=self.device)
        c = self.probe.ratio(model.state_dict(), pairs, w_con).detach()
        self.c[pairs] = c.cpu().numpy()
        w_sig = torch.where(c < 1, torch.tanh(c), torch.ones_like(c))
        batch = self.features.batch(pairs, self.device)
        mask = batch.negatives
        i2t, t2i = contrastive_ce(model.batch_similarity(batch), mask, self.method.temperature)
        return (w_con * w_sig * (i2t + t2i)).mean()  # Eq. 12 with Eq. 2 (no 1/2, unlike the code)

    def state(self) -> dict[str, np.ndarray]:
        out = {"c": self.c, "w_con_sum": self.w_con_sum,
               "rescorings": np.array([self.rescorings])}
        if self.entries is not None:
            out |= {"image_entry": self.entries[0], "text_entry": self.entries[1]}
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.c = state["c"].astype(np.float64)
        self.w_con_sum = state["w_con_sum"].astype(np.float64)
        self.rescorings = int(state["rescorings"][0])
        if "image_entry" in state:
            self.entries = (state["image_entry"], state["text_entry"])

    def end_epoch(self, model: torch.nn.Module, epoch: int) -> dict[str, float]:
        scores = self.scores
        seen = np.isfinite(self.c) & scores.kept
        return {"alpha": scores.alpha, "beta": scores.beta,
                "dropped_share": float(1 - scores.kept.mean()),
                "noise_rate": scores.fit.noise_rate,
                "insignificant_share": float((self.c[seen] < 1).mean()) if seen.any() else 0.0}


@dataclass
class SDD(Method):
    """Self-Drop and Dual-Weight; the paper's defaults where they fit a matcher trained here
    (see :attr:`departures`)."""

    name: ClassVar[str] = "sdd"
    min_pairs: ClassVar[int] = 1200
    summary: ClassVar[str] = ("SDD (2024): self-drop below alpha, confidence and significance "
                              "weights, fine-tuning on the dual-weighted InfoNCE")
    departures: ClassVar[tuple[str, ...]] = (
        "alpha and beta default to auto (the mixture's 0.5 boundary and its clean mean) because "
        "the paper's 20 and 30 belong to CLIP ViT-B/32's scale.",
        "InfoNCE temperature 0.05, learning rate 2e-4 and 10 epochs, not CLIP's 0.01, 2e-7 and "
        f"5, which cannot move a matcher trained for a few epochs ({RESULTS}).",
        "Without a loaded matcher or pretrained CLIP the model is NCR's warm-up on the corpus "
        "itself, not zero-shot CLIP.",
        "Memory entries exclude the pair's own image and its other captions (NPC's code lets a "
        "clean pair be its own entry).",
        "The siamese copy takes a plain SGD step of probe_step in eval mode on half the "
        "w_con-weighted InfoNCE, not an AdamW step, so c is deterministic.",
        "c combines the memory losses by direction as Eq. 9-10 print them; the authors' code "
        "combines them by entry, (L_img_before / L_img_after + L_txt_before / L_txt_after) / 2.",
        "The training loss is Eq. 12 with Eq. 2's InfoNCE, CE(I, T) + CE(T, I); the authors' "
        "code halves it.",
        "w_con is fitted on min-max normalised s (the paper is silent); the authors' code fits "
        "raw s, which moves w_con by a few hundredths through the mixture's regularisation.",
        "clean_prob averages w_con over every epoch's re-scoring (final=mean) and halves it for "
        f"dropped pairs; the paper gives no score ({RESULTS}).",
        "A kept pair with w_con under vague_below (0.8) is vague; the paper gives no cut, and "
        "with the fitted alpha every kept pair has w_con >= 0.5.",
    )

    alpha: float | None = param(
        None, rule="the mixture's decision boundary: the lowest s whose w_con reaches 0.5",
        help="self-drop threshold on s = scale * cos (Eq. 4; the paper's 20)")
    beta: float | None = param(
        None, rule="the clean component's mean", help="memory-bank threshold on s (Eq. 7; the "
        "paper's 30)")
    scale: float = param(100.0, low=0, low_open=True, help="s = scale * cos (CLIP's 100)")
    epochs: int = param(10, low=1, help="epochs of fine-tuning")
    batch_size: int = param(128, low=2, help="pairs per batch")
    lr: float = param(2e-4, low=0, low_open=True, help="learning rate (AdamW)")
    weight_decay: float = param(0.2, low=0, help="AdamW weight decay (the paper's 0.2)")
    temperature: float = param(0.05, low=0, low_open=True, help="InfoNCE temperature")
    probe_step: float = param(0.05, low=0, low_open=True,
                              help="SGD step of the siamese copy (Eq. 9-10)")
    vague_below: float = param(0.8, low=0, high=1,
                               help="w_con under which a kept pair is vague")
    final: Literal["mean", "last"] = param(
        "mean", help="clean_prob from w_con averaged over every re-scoring, or the last one")
    warmup_epochs: int | None = param(
        None, low=1, rule="gmm's warm-up rule for the corpus size", help="epochs of the warm-up "
        "when no matcher is loaded")
    warmup_lr: float = param(2e-4, low=0, low_open=True, help="learning rate of the warm-up")

    def own_partitions(self) -> str:
        return ("sdd draws its own partitions (noisy: the pairs it drops at alpha; vague: kept "
                "pairs with w_con under -p vague_below)")

    def fit(self, features: Features, context: Context) -> MethodResult:
        config = context.matcher_config
        if context.initial is not None or (config is not None and config.starts_pretrained):
            model, source = starting_matcher(context)
        else:
            model, _, source = warmed_matcher(features, context, self.warmup_epochs,
                                              self.batch_size, self.warmup_lr)
        objective = SelfDropDualWeight(features, self, context.device, context.seed)
        config = TrainConfig.from_context(context, epochs=self.epochs, lr=self.lr,
                                          weight_decay=self.weight_decay, grad_clip=2.0)
        history = train(model, objective, config, context.progress)

        model.eval()
        embeddings = embed(model, features, context.device, dtype=kept_dtype(features))
        final = rescore(embeddings, features, self.scale, self.alpha, self.beta, context.seed)
        w_con = final.w_con
        if self.final == "mean":
            w_con = (objective.w_con_sum + final.w_con) / (objective.rescorings + 1)
        clean_prob = np.where(final.kept, w_con, 0.5 * w_con)
        parts = np.full(features.n_pairs, "clean_significant", dtype=object)
        parts[w_con < self.vague_below] = "vague"
        parts[~final.kept] = "noisy"
        c = objective.c
        w_sig = np.where(np.isfinite(c), np.where(c < 1, np.tanh(c), 1.0), np.nan)
        return MethodResult(
            clean_prob=clean_prob,
            columns={"sdd_sim": final.s / self.scale, "sdd_w_con": w_con,
                     "sdd_w_sig": w_sig},
            matcher=model, embeddings=embeddings, noise_rate=float(1 - final.kept.mean()),
            partition=parts, significance="update",
            report={"similarity_source": source, "alpha": final.alpha, "beta": final.beta,
                    "memory_bank": objective.bank_size, "mixture": final.fit.as_dict(),
                    "history": history, "dropped": int((~final.kept).sum())})
