"""``pc2``: Pseudo-Classification based Pseudo-Captioning (Duan et al., ACM MM 2024).

PC² keeps NCR's co-divided training (:class:`~ncclean.methods.gmm.CoDivide`: warm-up, a loss
GMM per network, each network trained on the other's division) and adds three pieces:

- **Pseudo-classification** (Sec. 3.2). A K-way classifier ``C`` (Linear -> ReLU -> Linear),
  shared by both modalities, reads each network's joint embeddings. The caption's argmax class is
  the hard label of its image: ``L_pse = CE(C(f(I)), argmax C(g(T)))``; the label passes no
  gradient, so ``L_pse`` trains the image path and ``C``. Against collapse,
  ``L_ent = sum_k pbar_k log pbar_k = -H(pbar)`` with ``pbar`` the batch-mean image prediction
  is *minimised*, which maximises the entropy of the batch-mean prediction and spreads the
  images over the classes, as the paper's text intends. The printed Eq. 3 has the opposite sign
  (minimising it collapses every image into one class), and the authors' code maximises the
  mean *per-sample* entropy instead (which makes each prediction flat, not the classes used).
- **Pseudo-captioning** (Sec. 3.3). In co-training each clean batch comes with a noisy batch.
  A noisy pair's caption is discarded; its image is matched with the caption of the clean pair
  in the clean batch whose image's class-probability vector is most cosine-similar (``S^p``),
  with margin ``alpha (m^S^p - 1) / (m - 1)``; below ``S^p = 0.5`` the pair gives no
  supervision (the authors' code). Negatives are the other noisy images and pseudo-captions.
- **Oscillation rectification** (Sec. 3.4). ``o_i = KL(p_i^(e-1) || p_i^(e))``, the change of
  an image's class prediction between consecutive divisions (Eq. 7's direction; the code has
  the reverse), feeds a second GMM whose low-oscillation posterior is ``w_o``. A clean-set pair's
  label becomes ``y = w_c + (1 - w_c) 1(w_o >= tau) w_o`` (Eq. 8), replacing NCR's co-rectified
  label. The division itself, and so ``clean_prob``, comes from the loss GMM alone.

Where this departs from the paper: :attr:`PC2.departures` (``ncclean methods pc2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ncclean.methods.base import Context, MethodResult, param
from ncclean.methods.gmm import CO_DIVISION_DEPARTURES, GMM, CoDivide
from ncclean.methods.mixture import MixtureFit, clean_split, fit_clean_posterior
from ncclean.models.features import Batch, Features
from ncclean.models.linear import Linear
from ncclean.models.matcher import Ensemble
from ncclean.seeds import derive_seed
from ncclean.train.losses import negative_mask
from ncclean.train.scoring import embed

RESULTS = "benchmarks/results/pc2.md"


def n_classes_for(n_images: int, requested: int | None) -> int:
    """The number of pseudo-classes: ``requested``, or the rule in the module docstring."""
    if requested is not None:
        return requested
    return int(min(128, max(2, n_images // 20)))


class Classified(nn.Module):
    """A matcher with PC²'s pseudo-classifier over its joint embeddings; encodes as the matcher."""

    def __init__(self, matcher: nn.Module, n_classes: int, hidden: int = 256,
                 clip_apart: bool = False):
        super().__init__()
        self.matcher = matcher
        self.config = matcher.config
        self.head = nn.Sequential(Linear(matcher.embed_dim, hidden), nn.ReLU(),
                                  Linear(hidden, n_classes))
        self.clip_apart = clip_apart

    def clip_groups(self) -> list[list[nn.Parameter]]:
        """One clipping group, or the matcher and the head apart (``clip_apart``: when the head
        reads detached embeddings, its gradients should not shrink the matcher's steps)."""
        if self.clip_apart:
            return [list(self.matcher.parameters()), list(self.head.parameters())]
        return [list(self.parameters())]

    @property
    def embed_dim(self) -> int:
        return self.matcher.embed_dim

    @property
    def same_in_eval(self) -> bool:
        return getattr(self.matcher, "same_in_eval", False)

    def encode_images(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.matcher.encode_images(*inputs)

    def encode_texts(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.matcher.encode_texts(*inputs)

    def batch_similarity(self, batch: Batch) -> torch.Tensor:
        return self.matcher.batch_similarity(batch)


@torch.no_grad()
def class_probabilities(head: nn.Module, vectors: np.ndarray, device: str = "cpu",
                        block: int = 8192) -> np.ndarray:
    """``softmax(C(vectors))`` for ``(n, d)`` embeddings, ``(n, K) float32``."""
    head.eval()
    out = [torch.softmax(head(torch.from_numpy(vectors[start:start + block]).to(device)), 1)
           .cpu().numpy() for start in range(0, len(vectors), block)]
    return np.concatenate(out) if out else np.zeros((0, head[-1].out_features), np.float32)


def kl_divergence(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Row-wise ``KL(before || after)`` of probability vectors, ``(n,)``."""
    eps = 1e-8
    return np.sum(before * (np.log(before + eps) - np.log(after + eps)), axis=1)


class PseudoClassify(CoDivide):
    """NCR's co-division with PC²'s classification, pseudo-caption and oscillation terms."""

    def __init__(self, features: Features, method: PC2, warmup: int, epochs: int, device: str,
                 seed: int):
        super().__init__(features, method, warmup, epochs, device, seed)
        n = features.n_pairs
        self.bank: list[np.ndarray] | None = None  # per network: (n_images, K) at the last look
        self.oscillation = np.zeros((2, n), dtype=np.float32)
        self.w_osc = np.zeros((2, n))
        self.osc_fits: list[MixtureFit | None] = [None, None]
        self.image_probs: list[np.ndarray] = [np.zeros(0), np.zeros(0)]
        self.text_probs: list[np.ndarray] = [np.zeros(0), np.zeros(0)]

    # -- division and oscillation ------------------------------------------------------------

    def observe(self, k: int, member: torch.nn.Module, embeddings) -> None:
        """Network ``k``'s class probabilities of every image and caption."""
        self.image_probs[k] = class_probabilities(member.head, embeddings.images, self.device)
        self.text_probs[k] = class_probabilities(member.head, embeddings.texts, self.device)

    def begin_epoch(self, model: Ensemble, epoch: int) -> None:
        if self.warmup and epoch == self.warmup - 1:  # the reference for the first oscillation
            for k, member in enumerate(model.members):
                self.observe(k, member, embed(member, self.features, self.device))
            self.bank = list(self.image_probs)
        super().begin_epoch(model, epoch)

    def divide(self, model: Ensemble) -> None:
        super().divide(model)
        group = self.features.image_group
        for k in range(2):
            if self.bank is None:  # nothing to compare with yet: no rectification
                self.oscillation[k] = 0.0
                self.w_osc[k] = 0.0
                continue
            self.oscillation[k] = kl_divergence(self.bank[k], self.image_probs[k])[group]
            self.w_osc[k], self.osc_fits[k] = fit_clean_posterior(self.oscillation[k], "low",
                                                                  seed=self.seed)
        self.bank = list(self.image_probs)

    def rectified(self, w: np.ndarray, w_osc: np.ndarray) -> np.ndarray:
        """Eq. 8: ``y = w + (1 - w) 1(w_o >= tau) w_o``."""
        return w + (1 - w) * (w_osc >= self.method.p_threshold) * w_osc

    def clean_label(self, member: Classified, batch, clean: np.ndarray, k: int,
                    sims: torch.Tensor | None = None) -> torch.Tensor:
        """Eq. 8's label of network ``k``'s clean-set pairs, or NCR's with ``rectify="ncr"``."""
        if self.method.rectify == "ncr":
            return super().clean_label(member, batch, clean, k, sims)
        return torch.as_tensor(self.rectified(self.posterior[1 - k][clean],
                                              self.w_osc[1 - k][clean]),
                               dtype=torch.float32, device=self.device)

    # -- loss ----------------------------------------------------------------------------------

    def classification(self, member: Classified, images: torch.Tensor,
                       texts: torch.Tensor) -> torch.Tensor:
        """``lambda_pse L_pse + lambda_ent L_ent`` of a batch's image and caption embeddings."""
        if not self.method.head_gradient:  # the captions' side is a label, never a gradient
            images = images.detach()
        logits = member.head(images)
        with torch.no_grad():
            q = torch.softmax(member.head(texts), dim=1)
            if self.method.balanced_labels:  # the caption's class relative to the batch's
                q = q / q.mean(dim=0, keepdim=True)
            label = q.argmax(dim=1)
        mean = torch.softmax(logits, dim=1).mean(dim=0)
        negative_entropy = (mean * torch.log(mean.clamp(min=1e-8))).sum()
        return self.method.lambda_pse * F.cross_entropy(logits, label) + \
            self.method.lambda_ent * negative_entropy

    def extra_loss(self, member: Classified, images: torch.Tensor,
                   texts: torch.Tensor) -> torch.Tensor:
        """PC²'s classification terms on every batch, warm-up and co-training alike."""
        return self.classification(member, images, texts)

    noisy_sides = ("images",)  # L_n reads the noisy pairs' images only

    def noisy_loss(self, member: Classified, other: Classified, noisy: Batch, clean: Batch,
                   clean_images: torch.Tensor, clean_texts: torch.Tensor,
                   embedded: tuple[torch.Tensor | None, ...] | None = None) \
            -> torch.Tensor | None:
        """``lambda_noisy L_n``: the noisy images against pseudo-captions from the clean batch
        (none when the clean batch is empty)."""
        if not len(clean_images):
            return None
        return self.method.lambda_noisy * self.pseudo_caption_loss(
            member, noisy, clean_images, clean_texts, clean.text_group,
            embedded[0] if embedded is not None else None)

    def pseudo_caption_loss(self, member: Classified, noisy, clean_images: torch.Tensor,
                            clean_texts: torch.Tensor, clean_text_group: torch.Tensor,
                            images: torch.Tensor | None = None) -> torch.Tensor:
        """``L_n`` (Eq. 4-6): each noisy image against the caption of the clean pair in the batch
        whose image's class probabilities are closest; pairs with ``S^p`` below the threshold
        give no supervision. ``images``: the noisy images' embeddings, if already made."""
        if images is None:
            images = member.encode_images(*noisy.images)
        with torch.no_grad():
            noisy_p = F.normalize(torch.softmax(member.head(images), 1), dim=1)
            clean_p = F.normalize(torch.softmax(member.head(clean_images), 1), dim=1)
            closeness = (noisy_p @ clean_p.T).max(dim=1)
            donor, similarity = closeness.indices, closeness.values
            usable = (similarity >= self.method.pseudo_threshold).float()
        # index_select: indexing's backward adds the gradients of repeated donors in a varying
        # order on several threads (two runs with one seed differed)
        captions = clean_texts.index_select(0, donor)
        mask = negative_mask(noisy.image_group, clean_text_group[donor])
        return (usable * self.robust_loss(images @ captions.T, mask, similarity)).sum()

    def end_epoch(self, model: Ensemble, epoch: int) -> dict[str, float]:
        report = super().end_epoch(model, epoch)
        if epoch >= self.warmup and self.image_probs[0].size:
            used = [len(np.unique(p.argmax(1))) for p in self.image_probs]
            report |= {"classes_used": float(np.mean(used)),
                       "low_oscillation_share": float((self.w_osc >= 0.5).mean())}
        return report

    def state(self) -> dict[str, np.ndarray]:
        state = super().state()
        if self.bank is not None:
            state |= {"bank": np.stack(self.bank)}
        return state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_state(state)
        if "bank" in state:
            self.bank = list(state["bank"])


@dataclass
class PC2(GMM):
    """PC² on NCR's co-division. NCR's fields keep their meaning and defaults (see
    :class:`~ncclean.methods.gmm.GMM`); ``soft_margin_base`` is PC²'s curve ``m`` (10) and
    ``p_threshold`` its ``tau`` for both mixtures."""

    name: ClassVar[str] = "pc2"
    summary: ClassVar[str] = ("PC2 (ACM MM 2024): NCR's division plus pseudo-classes, in-batch "
                              "pseudo-captions and prediction-oscillation rectification")
    departures: ClassVar[tuple[str, ...]] = CO_DIVISION_DEPARTURES + (
        "L_ent maximises the entropy of the batch-mean prediction, as the text intends; the "
        "printed Eq. 3 has the opposite sign and the authors' code flattens each prediction.",
        "Class predictions are kept per image and looked up by global pair index, from an eval "
        "pass at every division, not written during training steps.",
        "The classifier reads the joint embedding and a pseudo-caption is the donor's caption "
        "embedding (no region or word features here).",
        "Pseudo-caption supervision needs S^p >= pseudo_threshold (the authors' code) and starts "
        "with NCR's noisy pairs (noisy_from).",
        "A caption's hard class is its argmax relative to the batch's mean prediction "
        "(balanced_labels); the raw argmax sends every caption to one class "
        f"({RESULTS}).",
        "K is 128 from 2,560 distinct images on, max(2, n_images // 20) below.",
        "Oscillation is KL(previous || current), Eq. 7's direction (the authors' code has the "
        "reverse).",
        "The final pseudo-captions are searched over the whole corpus in the two networks' "
        "class-probability space, not in a batch.",
    )

    noisy_from: float | None = param(
        0.5, low=0, high=1, help="share of co-training after which noisy pairs join the loss")
    n_classes: int | None = param(
        None, low=2, rule="128 from 2,560 distinct images on, else max(2, n_images // 20)",
        help="pseudo-classes K")
    classifier_hidden: int = param(256, low=1, help="hidden width of the classifier C")
    lambda_pse: float = param(1.0, low=0, help="weight of the pseudo-classification loss")
    lambda_ent: float = param(10.0, low=0, help="weight of the batch-entropy term")
    lambda_noisy: float = param(1.0, low=0, help="weight of the pseudo-caption loss L_n")
    pseudo_threshold: float = param(0.5, low=0, high=1,
                                    help="S^p under which a pseudo-caption gives no supervision")
    balanced_labels: bool = param(True, help="caption classes relative to the batch mean "
                                  "(ours) instead of the raw argmax")
    rectify: Literal["oscillation", "ncr"] = param(
        "oscillation", help="clean-set labels by Eq. 8, or NCR's co-rectified label (ours)")
    head_gradient: bool = param(True, help="the classification losses shape the matcher's "
                                "embeddings (false: the head reads them detached, ours)")

    def _model(self, ensemble: Ensemble, features: Features, context: Context) -> nn.Module:
        k = n_classes_for(len(features.image_data), self.n_classes)
        state = torch.random.get_rng_state()
        members = []
        try:
            for index, matcher in enumerate(ensemble.members):
                torch.manual_seed(derive_seed(context.seed, "pc2-classifier", index))
                members.append(Classified(matcher, k, self.classifier_hidden,
                                          clip_apart=not self.head_gradient))
        finally:
            torch.random.set_rng_state(state)
        return Ensemble(members)

    def _matcher(self, model: nn.Module) -> Ensemble:
        return Ensemble([member.matcher for member in model.members])

    def _objective(self, features: Features, warmup: int, epochs: int,
                   context: Context) -> PseudoClassify:
        return PseudoClassify(features, self, warmup, epochs, context.device, context.seed)

    def _finish(self, result: MethodResult, objective: PseudoClassify,
                model: nn.Module) -> MethodResult:
        from ncclean.stages.pseudocaption import DonorSpace

        features = objective.features
        w_osc = objective.w_osc.mean(axis=0)
        clean = clean_split(result.clean_prob, self.p_threshold)
        result.columns["pc2_label"] = np.where(
            clean, objective.rectified(result.clean_prob, w_osc), result.clean_prob)
        result.columns["pc2_osc_kl"] = objective.oscillation.mean(axis=0)
        result.columns["pc2_w_osc"] = w_osc
        # Class indices are each network's own; report network A's.
        result.columns["pc2_class_img"] = \
            objective.image_probs[0].argmax(1)[features.image_group].astype(np.int64)
        result.columns["pc2_class_txt"] = \
            objective.text_probs[0].argmax(1)[features.text_group].astype(np.int64)
        space = np.concatenate(
            [p / np.linalg.norm(p, axis=1, keepdims=True) for p in objective.image_probs],
            axis=1) / np.sqrt(2)
        space = space.astype(np.float32)
        result.donor_space = DonorSpace(query=space, key=space, name="pc2-classes",
                                        min_score=self.pseudo_threshold,
                                        query_index=features.image_group,
                                        key_index=features.image_group)
        result.report |= {
            "n_classes": int(objective.image_probs[0].shape[1]),
            "oscillation_mixtures": [f.as_dict() for f in objective.osc_fits if f is not None]}
        return result
