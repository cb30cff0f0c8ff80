import math

import numpy as np
import pytest
import torch

from ncclean.models.features import Batch
from ncclean.train.losses import (
    adaptive_prediction,
    hardest_negative_hinge,
    info_nce,
    mean_hinge,
    negative_mask,
    relative_to_top,
    soft_margin,
)

SIMS = torch.tensor([[0.9, 0.3, 0.8],
                     [0.1, 0.5, 0.6],
                     [0.2, 0.4, 0.7]])
ALL = ~torch.eye(3, dtype=torch.bool)


def test_negative_mask_excludes_same_image_and_same_text():
    mask = negative_mask(torch.tensor([0, 0, 1, 2]), torch.tensor([5, 6, 7, 5]))
    assert mask.tolist() == [[False, False, True, False],
                             [False, False, True, True],
                             [True, True, False, True],
                             [False, True, True, False]]
    assert torch.equal(mask, mask.T)


def test_mean_hinge_by_hand():
    loss = mean_hinge(SIMS, ALL, margin=0.2)
    # pair 0: image->text [0.2-0.9+0.3]+=0, [0.2-0.9+0.8]+=0.1 -> 0.05;
    #         text->image [0.2-0.9+0.1]+=0, [0.2-0.9+0.2]+=0 -> 0.
    assert loss[0].item() == pytest.approx(0.05)
    # pair 1: i2t [0.2-0.5+0.1]=0, [0.2-0.5+0.6]=0.3 -> 0.15; t2i [0.2-0.5+0.3]=0, [0.2-0.5+0.4]=0.1
    assert loss[1].item() == pytest.approx(0.15 + 0.05)


def test_masked_negatives_do_not_count():
    mask = ALL.clone()
    mask[0, 2] = mask[2, 0] = False  # pair 2 repeats pair 0's caption text
    loss = mean_hinge(SIMS, mask, margin=0.2)
    assert loss[0].item() == pytest.approx(0.0)  # only negative left is pair 1: no violation
    changed = SIMS.clone()
    changed[0, 2] = 5.0
    assert torch.allclose(mean_hinge(changed, mask)[0], loss[0])


def test_mean_hinge_matches_the_masked_mean_and_its_gradient():
    """The hinge over normalised weights against the plain masked mean of the definition, with
    per-pair margins, a masked duplicate and a pair left without any valid negative."""
    generator = torch.Generator().manual_seed(0)
    sims = torch.rand(6, 6, generator=generator, requires_grad=True)
    margins = torch.rand(6, generator=generator) * 0.2
    mask = negative_mask(torch.tensor([0, 1, 2, 3, 3, 4]), torch.tensor([0, 1, 2, 3, 4, 4]))
    mask[5, :] = mask[:, 5] = False  # pair 5: no valid negative, loss 0
    positive = sims.diagonal()
    i2t = (margins[:, None] - positive[:, None] + sims).clamp(min=0)
    t2i = (margins[None, :] - positive[None, :] + sims).clamp(min=0)
    count = mask.sum(1).clamp(min=1)
    expected = (i2t * mask).sum(1) / count + (t2i * mask).sum(0) / count
    loss = mean_hinge(sims, mask, margins)
    assert torch.allclose(loss, expected)
    assert loss[5].item() == 0.0
    (expected_grad,) = torch.autograd.grad(expected.sum(), sims)
    (grad,) = torch.autograd.grad(loss.sum(), sims)
    assert torch.allclose(grad, expected_grad)


def test_a_batch_makes_its_negative_mask_once():
    image_group, text_group = torch.tensor([0, 0, 1, 2]), torch.tensor([5, 6, 7, 5])
    batch = Batch(pairs=np.arange(4), images=(), texts=(), image_group=image_group,
                  text_group=text_group)
    assert torch.equal(batch.negatives, negative_mask(image_group, text_group))
    assert batch.negatives is batch.negatives


def test_hardest_negative_hinge_with_per_pair_margins():
    loss = hardest_negative_hinge(SIMS, ALL, torch.tensor([0.2, 0.0, 0.2]))
    # pair 0: hardest text 0.8 -> 0.2-0.9+0.8=0.1; hardest image 0.2 -> 0 ; total 0.1
    assert loss[0].item() == pytest.approx(0.1)
    # pair 1 with margin 0: hardest text 0.6 -> 0.1; hardest image 0.4 -> 0
    assert loss[1].item() == pytest.approx(0.1)
    alone = hardest_negative_hinge(SIMS, torch.zeros(3, 3, dtype=torch.bool), 0.2)
    assert torch.equal(alone, torch.zeros(3))


def test_info_nce_matches_cross_entropy_and_ignores_masked():
    loss = info_nce(SIMS, ALL, temperature=0.1)
    logits = SIMS / 0.1
    i2t = torch.nn.functional.cross_entropy(logits, torch.arange(3), reduction="none")
    t2i = torch.nn.functional.cross_entropy(logits.T, torch.arange(3), reduction="none")
    assert torch.allclose(loss, (i2t + t2i) / 2)
    mask = ALL.clone()
    mask[1, 2] = mask[2, 1] = False
    changed = SIMS.clone()
    changed[1, 2] = 9.0
    assert torch.allclose(info_nce(changed, mask)[1], info_nce(SIMS, mask)[1])


def test_soft_margin_values_from_the_paper():
    values = soft_margin(torch.tensor([0.0, 0.5, 1.0]), 0.2, 10.0)
    assert values.tolist() == pytest.approx([0.0, 0.2 * (math.sqrt(10) - 1) / 9, 0.2])


def test_adaptive_prediction_is_relative_to_the_best_pairs():
    sims = torch.eye(10) * 0.6 + 0.1
    sims[9, 9] = 0.1  # one mismatched pair: no margin over its negatives
    prediction = adaptive_prediction(sims, ~torch.eye(10, dtype=torch.bool), margin=0.2)
    assert prediction[:9].tolist() == pytest.approx([1.0] * 9)
    assert prediction[9].item() == pytest.approx(0.0)
    assert torch.equal(relative_to_top(torch.zeros(5)), torch.zeros(5))
