import numpy as np
import pytest
import torch

from ncclean.models.gru import _layout
from ncclean.models.towers import TokenGRU


def _captions(lengths, width, vocab=40, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), width), dtype=np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, vocab, length)
    return torch.from_numpy(ids), torch.tensor(lengths)


@pytest.mark.parametrize("lengths", [[3, 1, 5, 5, 2, 0, 4], [6] * 5, [1], [2, 7, 1, 1, 3, 7]])
def test_cpu_path_matches_torch_gru_in_values_and_gradients(lengths):
    torch.manual_seed(0)
    tower = TokenGRU(40, embed_dim=8, word_dim=6, dropout=0.0)
    ids, lens = _captions(lengths, max(max(lengths), 1) + 2)
    results = []
    for run in (tower.forward, lambda t, n: tower.packed_forward(
            torch.where(torch.arange(t.shape[1]) == 0, t.clamp(min=1), t), n.clamp(min=1))):
        tower.zero_grad()
        out = run(ids, lens)
        (out * torch.linspace(-1, 2, 8)).square().sum().backward()
        results.append((out.detach(), {k: p.grad.clone() for k, p in tower.named_parameters()}))
    (ours, our_grads), (torch_out, torch_grads) = results
    torch.testing.assert_close(ours, torch_out, rtol=1e-5, atol=1e-6)
    for name, grad in torch_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_layout_reads_each_word_once_and_the_reverse_direction_backwards():
    sizes, forward, backward, caption = _layout(np.array([2, 3, 1]), width=4)
    assert sizes == [3, 2, 1]  # caption 1 (3 words), then 0 (2), then 2 (1)
    assert caption.tolist() == [1, 0, 2, 1, 0, 1]
    assert forward.tolist() == [4, 0, 8, 5, 1, 6]  # caption * width + word
    # at each row, the reverse direction reads the caption's word (length - 1 - step): as a
    # forward row, caption 1's word 2 is row 5, caption 0's word 1 row 4, and so on
    assert backward.tolist() == [5, 4, 2, 3, 1, 0]


def test_dropout_and_empty_batches():
    torch.manual_seed(0)
    tower = TokenGRU(40, embed_dim=8, word_dim=6, dropout=0.5).train()
    ids, lens = _captions([3, 2], 4)
    assert not torch.equal(tower(ids, lens), tower(ids, lens))  # dropout draws per call
    tower.eval()
    assert torch.equal(tower(ids, lens), tower(ids, lens))
    assert tower(ids[:0], lens[:0]).shape == (0, 8)
