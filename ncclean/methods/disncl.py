"""``disncl``: Disentangled Noisy Correspondence Learning (Dang et al., IEEE TIP 2025).

One matcher (no co-teaching). Four heads split its joint embeddings ``F_V``, ``F_T`` into
modality-invariant ``V_S``, ``T_S`` and modality-exclusive ``V_X``, ``T_X`` parts; everything the
method decides happens in the invariant space, and the matcher it returns encodes into it
(:class:`DisentangledMatcher`), so significance and pseudo-captions work there too, as the paper's
inference does. Each piece below is marked **paper**, **intent** (the authors' intent, inferred
where the text is silent or ambiguous) or **ours**.

- Heads and discriminators: 3-layer MLPs, hidden 256, LeakyReLU 0.2 (paper). The heads read the
  matcher's unit joint embeddings times ``sqrt(d)`` and give ``head_dim`` wide vectors, the
  matcher's width by default (ours; the paper: 1,024 to 512). ``heads="residual"`` (the default,
  ours) adds a bias-free linear skip beside each head's MLP, as the vector tower has, so the
  invariant space starts as a projection of the joint space: with plain MLP heads, trained for
  the few passes a head on fixed vectors gets, AUROC drops from 0.948 to 0.931 at 50% noise
  (``benchmarks/results/disncl.md``, "Closing the gap"). ``H`` is the cosine of ``V_S`` and
  ``T_S`` (ours: the paper's is SGRAF's learned similarity).
- Clean set of a batch (Eq. 2, paper): the mutual in-batch argmax of ``H``, recomputed on every
  training batch; another caption of the same image, or the same caption text, is masked out of
  both argmaxes (ours, as in every loss here). ``clean_rank=k`` (ours, default 10) keeps a pair
  whose partner is within the top ``k`` both ways; ``clean_rank=1`` is Eq. 2, which keeps 1-7% of
  a batch after the short warm-ups here (``benchmarks/results/disncl.md``). ``clean_set="union"``
  (ours, the default) also counts a pair clean when the epoch's mixture division (the posterior
  behind ``clean_prob``, > 0.5) does: on towers trained from scratch, where the in-batch ranks are
  weak, it adds 0.011 AUROC at 50% noise (``benchmarks/results/disncl.md``, "The defaults for
  towers from scratch"; ``"batch"`` is the paper's).
- ``L_align`` (Eq. 3, paper): hinge on the clean pairs with the soft margin
  ``alpha (m^H_ii - 1) / (m - 1)``, ``H_ii`` detached (intent, as NCR's labels). The paper's
  ``H_ii`` is SGRAF's similarity in [0, 1], near 1 for a match; a cosine of weak towers sits near
  0 and gives no margin, so ``margin_from="prediction"`` (ours, the default) reads ``H_ii`` as
  NCR's adaptive prediction ``P(I, T)`` of the invariant similarities, in [0, 1] against the
  batch; ``"cosine"`` is the cosine clipped to [0, 1]. ``robust_loss="hardest"`` is the paper's
  form; the default ``"mean"`` (ours) averages over the valid negatives: the hardest-negative
  form collapsed from scratch for ``gmm`` (``benchmarks/RESULTS.md``).
- ``L_soft`` (Eq. 4-6): cross-modal bootstrapped targets ``y = beta3 e_i + (1 - beta3) p`` of
  the other direction, detached (intent). The paper's "entropy function" ``H(p, y)`` is
  ambiguous: ``soft_loss="reverse"`` is ``-sum_j p_j log y_j`` with ``y`` clipped at 1e-4,
  bounded and symmetric, the reading Theorem 3's argument (after Ghosh et al.) needs;
  ``"forward"`` (the default, ours by measurement) is the usual, unbounded
  ``-sum_j y_j log p_j``, which detects better on both kinds of towers (the bounded loss barely
  trains towers from scratch). Eq. 4 zeroes noisy rows, which
  Eq. 6 skips anyway (``soft_columns="all"``, as written); ``"clean"`` (the default) also drops
  noisy items as candidates from every softmax (intent: Eq. 4 restricts the targets to the
  clean set).
- ``L_Dis`` (Eq. 1, 9-12) on the clean pairs, ``gamma L_S + (1 - gamma) L_X``: Jensen-Shannon
  estimates with one discriminator per information (paper; eight in all), on concatenated
  vectors, marginals the batch rolled by one without partners sharing an image or caption
  (intent). ``I(T; V_S)``, ``I(V; T_S)``, ``I(V; V_X)``, ``I(T; T_X)`` are maximised by encoders
  and discriminators together; Eq. 10's KL bound with unit variances is ``beta1 ||V_S - T_S||^2``
  on the raw head outputs (paper); ``I(T; V_X)``, ``I(V; T_X)`` (weight ``1 + beta2``, Eq. 11)
  and ``L_reg`` (Eq. 7, on the whole batch: intent) are min-max games (Eq. 12). The paper gives
  no mechanism for the games: a gradient reversal between encoders and discriminators lets the
  loop's one optimiser step serve both players (ours).
- Schedule: warm-up with ``L_align`` at the constant margin on every pair (paper; NCR-style, the
  paper does not say whether Eq. 2 filters it), then Eq. 8 with unit weights (``terms`` drops
  terms in Table V's order). Adam 2e-4, x0.1 at half of the main training, batch 128, ``tau``
  0.05, ``alpha`` 0.2, ``m`` 10, ``gamma`` 0.5, ``beta1 = beta2 = 0.1``, ``beta3`` 0.5 (paper).
  Epochs follow ``gmm``'s step rule (:func:`ncclean.methods.gmm.schedule`, 1 + 4 for a head on
  fixed image vectors), not 5 + 50 (ours); gradients clipped at 2.0, encoder and discriminators
  each on its own (ours).
- Per pair (ours; the paper scores no pair): ``disncl_sim`` the invariant cosine; ``disncl_loss``
  its mean hinge against a fixed pool (as ``gmm``'s division); ``disncl_keep`` the share of
  ``keep_passes`` fixed seeded batchings in which the pair is in the clean set (Eq. 2 made
  deterministic); ``disncl_x_sim`` the exclusive cosine. ``clean_prob``: the shared mixture on
  ``score`` (``sim`` by default), and with ``final="mean"`` (the default, as ``gmm``'s) the
  mixture's posterior averaged over the start of every full-loss epoch and the end. The report
  holds, per epoch, the clean-set share, each term's mean and each discriminator's accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from ncclean.methods.base import Context, Method, MethodResult, param
from ncclean.methods.gmm import schedule
from ncclean.methods.mixture import PosteriorMean, fit_clean_posterior
from ncclean.models.disentangled import (
    BANKS,
    CRITICS,
    DisentangledMatcher,
    DisNCLNet,
    ExclusiveView,
    jsd_information,
    reverse_gradient,
)
from ncclean.models.features import Features
from ncclean.train.loop import Objective, TrainConfig, train
from ncclean.train.losses import (
    adaptive_prediction,
    hardest_negative_hinge,
    mean_hinge,
    soft_margin,
)
from ncclean.train.scoring import Embeddings, embed, fixed_batches, kept_dtype, pair_losses

TERMS = ("align", "align+dis", "align+dis+soft", "full")  # Table V's rows, in order
def mutual_argmax(sims: torch.Tensor, negatives: torch.Tensor, rank: int = 1) -> torch.Tensor:
    """Eq. 2: ``(B,) bool``, pair ``i`` is the argmax of its row and of its column of ``sims``
    ``(B, B)`` among the valid negatives (:func:`ncclean.train.losses.negative_mask`) and
    itself, so a duplicate caption or a second caption of the image cannot outrank it (a tie
    keeps the pair). ``rank > 1`` (ours): fewer than ``rank`` valid negatives beat it in its row
    and in its column."""
    positive = sims.diagonal()
    above = (sims > positive[:, None]) & negatives, (sims > positive[None, :]) & negatives
    return (above[0].sum(dim=1) < rank) & (above[1].sum(dim=0) < rank)


def soft_alignment(sims: torch.Tensor, negatives: torch.Tensor, clean: torch.Tensor,
                   temperature: float, beta3: float, kind: str = "reverse",
                   columns: str = "all") -> torch.Tensor:
    """``L_soft`` per pair (Eq. 4-6), ``(B,)``: the image-to-text plus the text-to-image
    cross-entropy against the other direction's bootstrapped, detached soft target; ``kind``
    ``reverse`` (bounded by ``-2 log 1e-4``) or ``forward``. Pairs outside ``clean`` get 0;
    ``columns="clean"`` also removes them as candidates."""
    keep = negatives | torch.eye(len(sims), dtype=torch.bool, device=sims.device)
    keep_i2t, keep_t2i = keep, keep.T
    if columns == "clean":  # the diagonal stays, so no row is empty
        candidates = clean[None, :] | torch.eye(len(sims), dtype=torch.bool, device=sims.device)
        keep_i2t, keep_t2i = keep_i2t & candidates, keep_t2i & candidates
    logits = sims / temperature
    log_i2t = torch.log_softmax(logits.masked_fill(~keep_i2t, float("-inf")), dim=1)
    log_t2i = torch.log_softmax(logits.T.masked_fill(~keep_t2i, float("-inf")), dim=1)
    eye = torch.eye(len(sims), device=sims.device)
    total = torch.zeros(len(sims), device=sims.device)
    for log_p, other, support in ((log_i2t, log_t2i, keep_i2t), (log_t2i, log_i2t, keep_t2i)):
        target = beta3 * eye + (1 - beta3) * other.exp().detach()
        if kind == "reverse":
            total = total - (log_p.exp() * target.clamp(min=1e-4).log()).sum(dim=1)
        else:
            total = total - (target * log_p.masked_fill(~support, 0.0)).sum(dim=1)
    return torch.where(clean, total, torch.zeros_like(total))


class Disentangle(Objective):
    """DisNCL's training: warm-up epochs, then the full loss (see the module docstring)."""

    def __init__(self, features: Features, method: DisNCL, warmup: int, device: str, seed: int):
        self.features, self.m, self.warmup, self.device = features, method, warmup, device
        self.seed = seed
        self.stage = "warm-up"
        self.averaged = PosteriorMean(features.n_pairs)
        g, b2 = method.gamma, method.beta2
        weights = {"VS_FT": g, "TS_FV": g, "VX_FV": 1 - g, "TX_FT": 1 - g,  # Eq. 1, 11
                   "VX_FT": (1 - g) * (1 + b2), "TX_FV": (1 - g) * (1 + b2),
                   "VS_VX": 1.0, "TS_TX": 1.0}  # L_reg
        self.critic_weights = {bank: torch.tensor([weights[name] for name in names],
                                                  device=device)
                               for bank, names in BANKS.items()}
        self._reset()

    def _reset(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def _add(self, name: str, value: float | torch.Tensor, count: float = 1.0) -> None:
        if isinstance(value, torch.Tensor):
            value = float(value.detach())
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0.0) + count

    def begin_epoch(self, model: DisNCLNet, epoch: int) -> None:
        self.stage = "warm-up" if epoch < self.warmup else "training"
        self._reset()
        if epoch >= self.warmup and (self.m.final == "mean" or self.m.clean_set == "union"):
            model.matcher.eval()
            self.division = self.m.posterior(model.matcher, self.features, self.device,
                                             self.seed)[0]
            if self.m.final == "mean":
                self.averaged.add(self.division)

    def steps(self, epoch: int, rng: np.random.Generator) -> Iterator[Any]:
        order = rng.permutation(self.features.n_pairs)
        for start in range(0, len(order), self.m.batch_size):
            yield order[start:start + self.m.batch_size]

    def hinge(self, sims: torch.Tensor, mask: torch.Tensor, margins: Any) -> torch.Tensor:
        if self.m.robust_loss == "mean":
            return mean_hinge(sims, mask, margins)
        return hardest_negative_hinge(sims, mask, margins)

    def loss(self, model: DisNCLNet, step: np.ndarray, epoch: int) -> torch.Tensor:
        m, batch = self.m, self.features.batch(step, self.device)
        fv, vs, vx = model.matcher.split_images(*batch.images)
        ft, ts, tx = model.matcher.split_texts(*batch.texts)
        sims = F.normalize(vs, dim=-1) @ F.normalize(ts, dim=-1).T
        mask = batch.negatives
        if epoch < self.warmup:
            return self.hinge(sims, mask, m.margin).sum()

        clean = mutual_argmax(sims.detach(), mask, m.clean_rank)
        if m.clean_set == "union":
            clean = clean | torch.from_numpy(self.division[step] > 0.5).to(clean.device)
        self._add("clean_share", float(clean.sum()), len(clean))
        if m.margin_from == "cosine":
            label = sims.diagonal().detach().clamp(0.0, 1.0)
        else:
            label = adaptive_prediction(sims.detach(), mask, m.margin)
        margins = soft_margin(label, m.margin, m.soft_margin_base)
        total = self.hinge(sims, mask, margins)[clean].sum()
        self._add("align", total)
        terms = TERMS.index(m.terms)
        if terms >= 2:
            soft = soft_alignment(sims, mask, clean, m.temperature, m.beta3, m.soft_loss,
                                  m.soft_columns).sum()
            self._add("soft", soft)
            total = total + soft
        if terms >= 1 and int(clean.sum()) >= 2:
            dis = self.dis_loss(model, {"FV": fv, "VS": vs, "VX": vx, "FT": ft, "TS": ts,
                                        "TX": tx}, clean, batch)
            self._add("dis", dis)
            total = total + dis
        if terms >= 3:
            reg = self.mi_terms(model, "all", {"VS": vs, "VX": vx, "TS": ts, "TX": tx},
                                (batch.image_group, batch.text_group))
            self._add("reg", reg)
            total = total + reg
        return total

    def dis_loss(self, model: DisNCLNet, parts: dict[str, torch.Tensor], clean: torch.Tensor,
                 batch) -> torch.Tensor:
        """``L_Dis`` (Eq. 1) on the clean pairs: ``gamma L_S + (1 - gamma) L_X``."""
        m = self.m
        parts = {name: part[clean] for name, part in parts.items()}
        kl = ((parts["VS"] - parts["TS"]) ** 2).sum(dim=1).mean()
        return m.gamma * m.beta1 * kl + self.mi_terms(
            model, "clean", parts, (batch.image_group[clean], batch.text_group[clean]))

    def mi_terms(self, model: DisNCLNet, bank: str, parts: dict[str, torch.Tensor],
                 groups: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The sum of the informations of ``bank``'s critics between rows of ``parts`` (of
        pairs with image and caption ``groups``), each with its weight in
        :attr:`critic_weights`, as a loss: ``-weight * I`` for a cooperative term (everyone
        maximises it) and, for an adversarial one, ``-weight * I`` with the inputs behind a
        gradient reversal (the discriminator maximises it, the encoders minimise it)."""
        critics = model.critics[bank]
        inputs: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
        for name in critics.names:
            first, second, adversarial = CRITICS[name]
            for side, part in zip(inputs, (parts[first], parts[second])):
                side.append(reverse_gradient(part) if adversarial else part)
        estimate, right, count = jsd_information(critics, torch.stack(inputs[0]),
                                                 torch.stack(inputs[1]), groups)
        for name, hits in zip(critics.names, right.tolist()):
            self._add(f"accuracy_{name}", hits, count)
        return -(self.critic_weights[bank] * estimate).sum()

    def end_epoch(self, model: DisNCLNet, epoch: int) -> dict[str, float]:
        return {name: self.sums[name] / max(self.counts[name], 1.0) for name in self.sums}

    def state(self) -> dict[str, np.ndarray]:
        return self.averaged.state()

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.averaged.load_state(state)


def keep_share(embeddings: Embeddings, features: Features, batch_size: int, passes: int,
               seed: int, rank: int = 1) -> np.ndarray:
    """``(n_pairs,) float32``: the share of ``passes`` fixed seeded batchings of the corpus in
    which each pair is in the clean set (:func:`mutual_argmax`). Deterministic."""
    total = np.zeros(features.n_pairs)
    for k in range(passes):
        rng = np.random.default_rng([seed, 5147, k])
        for pairs, sims, mask in fixed_batches(embeddings, features, batch_size, rng):
            total[pairs] += mutual_argmax(sims, mask, rank).numpy()
    return (total / passes).astype(np.float32)


@dataclass
class DisNCL(Method):
    """DisNCL with the paper's defaults; the module docstring marks what is the paper's."""

    name: ClassVar[str] = "disncl"
    min_pairs: ClassVar[int] = 1200
    summary: ClassVar[str] = ("DisNCL (TIP 2025): mutual-argmax clean set, soft margins and soft "
                              "targets in a learned modality-invariant subspace")
    default_rules: ClassVar[dict[str, str]] = {
        "warmup_epochs": "gmm's step rule", "epochs": "gmm's step rule",
        "head_dim": "the matcher's width"}
    departures: ClassVar[tuple[str, ...]] = (
        "Similarity is the cosine of the invariant heads' outputs, not SGRAF's learned module.",
        "The default hinge averages over valid negatives (robust_loss=mean); hardest is the "
        "paper's Eq. 3.",
        "Same-image and same-caption pairs are masked out of the argmax, hinge and softmaxes.",
        "The min-max games of Eq. 12 and L_reg use gradient reversal (the paper gives no "
        "mechanism).",
        "Epochs follow gmm's optimiser-step rule instead of 5 + 50.",
        "The clean set keeps pairs within the top 10 both ways (clean_rank=1 is Eq. 2), or "
        "that the epoch's mixture division calls clean (clean_set=batch is the paper's).",
        "The soft margin reads NCR's adaptive prediction, not the cosine (margin_from=cosine).",
        "L_soft is the forward cross-entropy; the bounded reverse one, which Theorem 3 needs, "
        "detects worse (soft_loss=reverse).",
        "Each head has a linear skip beside its MLP (heads=mlp is the paper's).",
        "clean_prob is a two-component mixture on the invariant cosine, averaged over the "
        "full-loss epochs as gmm's; the paper scores no pair.",
    )

    warmup_epochs: int | None = param(None, low=0, rule="gmm's rule", help="L_align epochs")
    epochs: int | None = param(None, low=1, rule="gmm's rule", help="full-loss epochs")
    terms: Literal["align", "align+dis", "align+dis+soft", "full"] = param(
        "full", help="the loss terms, in Table V's order")
    gamma: float = param(0.5, low=0, high=1, help="L_S against L_X (Eq. 1)")
    beta1: float = param(0.1, low=0, help="invariant compression (KL bound, Eq. 10)")
    beta2: float = param(0.1, low=0, help="exclusive invariance penalty (Eq. 11)")
    beta3: float = param(0.5, low=0, high=1, help="one-hot weight of the soft targets")
    temperature: float = param(0.05, low=0, low_open=True, help="softmax temperature tau")
    margin: float = param(0.2, low=0, help="hinge margin alpha")
    soft_margin_base: float = param(10.0, low=1, low_open=True, help="soft-margin base m")
    clean_rank: int = param(10, low=1, help="clean when within this rank both ways (1: Eq. 2)")
    margin_from: Literal["cosine", "prediction"] = param(
        "prediction", help="H_ii of the soft margin: the invariant cosine, or NCR's P(I, T)")
    clean_set: Literal["batch", "union"] = param(
        "union", help="the clean set: in-batch mutual rank (Eq. 2), or it or the epoch's mixture")
    robust_loss: Literal["mean", "hardest"] = param("mean", help="L_align's negatives")
    soft_loss: Literal["reverse", "forward"] = param("forward", help="L_soft's cross-entropy")
    soft_columns: Literal["all", "clean"] = param("clean", help="noisy items as candidates")
    lr: float = param(2e-4, low=0, low_open=True, help="Adam's rate; x0.1 at half")
    batch_size: int = param(128, low=2, help="pairs per step")
    grad_clip: float = param(2.0, low=0, help="gradient norm clip (0: off)")
    head_dim: int | None = param(None, low=1, rule="the matcher's width",
                                 help="width of the invariant and exclusive parts")
    hidden: int = param(256, low=1, help="hidden width of heads and discriminators")
    heads: Literal["residual", "mlp"] = param("residual", help="a linear skip beside each head")
    score: Literal["sim", "loss", "keep"] = param("sim", help="what clean_prob is fitted on")
    final: Literal["mean", "last"] = param(
        "mean", help="clean_prob: the posterior averaged over the full-loss epochs, or the last")
    negatives: Literal["pool", "batches"] = param("pool", help="fixed negatives of the loss")
    pool_size: int = param(1024, low=1, help="fixed negative pool")
    keep_passes: int = param(5, low=1, help="fixed batchings behind disncl_keep")

    def fit(self, features: Features, context: Context) -> MethodResult:
        warmup, epochs = schedule(features.n_pairs, self.batch_size, self.warmup_epochs,
                                  self.epochs, context.frozen_images)
        backbone = context.initial if context.initial is not None else context.new_matcher(0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(context.seed * 1009 + 500)
            matcher = DisentangledMatcher(backbone, self.head_dim or backbone.embed_dim,
                                          self.hidden, self.heads)
            net = DisNCLNet(matcher, self.hidden)
        objective = Disentangle(features, self, warmup, context.device, context.seed)
        config = TrainConfig(epochs=warmup + epochs, lr=self.lr,
                             lr_drop_epochs=(warmup + epochs // 2,) if epochs >= 2 else (),
                             grad_clip=self.grad_clip, seed=context.seed, device=context.device,
                             checkpoint_dir=context.checkpoint_dir, resume=context.resume)
        history = train(net, objective, config, context.progress)

        matcher.eval()
        clean_prob, fit, embeddings, columns = self.posterior(matcher, features, context.device,
                                                              context.seed, every_column=True)
        columns["disncl_x_sim"] = embed(ExclusiveView(matcher).eval(), features, context.device,
                                        dtype=kept_dtype(features)).pair_similarity(features)
        clean_prob = objective.averaged.of(clean_prob)
        return MethodResult(
            clean_prob=np.clip(clean_prob, 0.0, 1.0), columns=columns, matcher=matcher,
            embeddings=embeddings, noise_rate=fit.noise_rate,
            report={"warmup_epochs": warmup, "epochs": epochs, "head_dim": matcher.head_dim,
                    "divisions": objective.averaged.count, "mixture": fit.as_dict(),
                    "history": history})

    def posterior(self, matcher: DisentangledMatcher, features: Features, device: str, seed: int,
                  every_column: bool = False) -> tuple:
        """The mixture's clean posterior on ``score`` of the matcher (in eval mode) as it is,
        its fit, the embeddings, and the per-pair signals: only ``score``'s, or with
        ``every_column`` all of ``disncl_sim``, ``disncl_loss``, ``disncl_keep``."""
        embeddings = embed(matcher, features, device, dtype=kept_dtype(features))
        signals = {
            "sim": lambda: embeddings.pair_similarity(features),
            "loss": lambda: pair_losses(embeddings, features, margin=self.margin,
                                        negatives=self.negatives, pool_size=self.pool_size,
                                        batch_size=self.batch_size, seed=seed),
            "keep": lambda: keep_share(embeddings, features, self.batch_size, self.keep_passes,
                                       seed, self.clean_rank),
        }
        wanted = signals if every_column else [self.score]
        columns = {f"disncl_{name}": signals[name]() for name in wanted}
        clean_prob, fit = fit_clean_posterior(columns[f"disncl_{self.score}"],
                                              "low" if self.score == "loss" else "high",
                                              seed=seed)
        return clean_prob, fit, embeddings, columns
