"""Every seed ncclean derives from the run's one ``--seed``, each under a name.

A run has one seed. Each random choice inside it (the weights of the k-th fresh matcher, the
batches of epoch ``e``, a fixed pool of negatives, the shuffles of a significance pass) draws
from its own stream, derived from that seed and a *purpose*, so that adding a random choice in one
place never moves the numbers drawn in another. The formulas below are the ones ncclean has
always used (their constants have no meaning beyond keeping the streams apart); they are kept
as they were so that the same seed still writes the same bytes.

Two kinds of stream:

- :func:`derive_seed`: an integer seed for ``torch.manual_seed`` (matcher weights, the
  training loop's per-epoch state), ``seed * multiplier + offset + k``;
- :func:`derive_rng`: a NumPy generator seeded with ``[seed, tag, *k]`` (numpy mixes the list
  into independent streams).
"""

from __future__ import annotations

import numpy as np

#: purpose -> (multiplier, offset) of ``seed * multiplier + offset + k``.
TORCH_PURPOSES: dict[str, tuple[int, int]] = {
    "matcher": (1009, 0),  # the k-th freshly initialised matcher of a method (Context.new_matcher)
    "pc2-classifier": (1009, 500),  # PC2's pseudo-classifier head of network k
    "retrain-matcher": (1009, 77),  # the matcher a retrain arm trains
    "epoch": (100_003, 0),  # torch's state at the start of training epoch k (train.loop)
    "crcl-piece": (7, 0),  # the training loop's seed for CRCL's piece k
}

#: purpose -> tag of the NumPy stream ``default_rng([seed, tag, *k])``.
NUMPY_PURPOSES: dict[str, int] = {
    "reference-pool": 31,  # the confident pairs the significance stage searches
    "donor-sample": 67,  # the clean donors the pseudo-caption stage searches, when capped
    "donor-null": 71,  # the random (noisy image, clean caption) pairs of its score floor
    "significance-pass": 53,  # the order of the k-th pass of SDD's ratio
    "crcl-scoring": 4111,  # the fixed batches of CRCL's k-th eval pass
    "negative-pool": 7919,  # the fixed negatives of per-pair losses (train.scoring)
}


def derive_seed(seed: int, purpose: str, k: int = 0) -> int:
    """The integer seed of ``purpose``'s ``k``-th stream (a :data:`TORCH_PURPOSES` name)."""
    multiplier, offset = TORCH_PURPOSES[purpose]
    return seed * multiplier + offset + k


def derive_rng(seed: int, purpose: str, *k: int) -> np.random.Generator:
    """A NumPy generator for ``purpose`` (a :data:`NUMPY_PURPOSES` name), indexed by ``k``."""
    return np.random.default_rng([seed, NUMPY_PURPOSES[purpose], *k])


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator that draws the batches of training epoch ``epoch``: the same whether the
    run started at epoch 0 or resumed at ``epoch``."""
    return np.random.default_rng([seed, epoch])
