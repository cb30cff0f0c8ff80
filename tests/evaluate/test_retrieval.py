import numpy as np
import pytest

from ncclean.evaluate.retrieval import recall_at_k, relevance, retrieval_metrics


def ncr_reference(sims: np.ndarray, text_image: np.ndarray) -> dict[str, float]:
    """NCR's evaluation.py i2t/t2i, written out with argsort (no ties in random data)."""
    n_images = sims.shape[0]
    i2t_ranks = []
    for i in range(n_images):
        order = np.argsort(sims[i])[::-1]
        i2t_ranks.append(min(np.where(order == j)[0][0] for j in np.flatnonzero(text_image == i)))
    t2i_ranks = [np.where(np.argsort(sims[:, j])[::-1] == text_image[j])[0][0]
                 for j in range(sims.shape[1])]
    out = {}
    for name, ranks in (("i2t", np.array(i2t_ranks)), ("t2i", np.array(t2i_ranks))):
        for k in (1, 5, 10):
            out[f"{name}_r{k}"] = 100.0 * np.mean(ranks < k)
    return out


def test_hand_computed_case():
    # 2 images, 3 captions: caption 0 and 1 belong to image 0, caption 2 to image 1.
    sims = np.array([[0.1, 0.9, 0.5],
                     [0.8, 0.2, 0.3]])
    metrics = retrieval_metrics(sims, np.array([0, 0, 1]), ks=(1, 2))
    # image 0: best caption (1) ranks first -> hit@1; image 1: caption 2 is behind caption 0.
    assert metrics.i2t == {1: 50.0, 2: 100.0}
    # caption 0 -> image 1 first (miss@1); caption 1 -> image 0 (hit); caption 2 -> image 0 (miss).
    assert metrics.t2i == pytest.approx({1: 100 / 3, 2: 100.0})
    assert metrics.rsum == pytest.approx(50 + 100 + 100 / 3 + 100)


def test_matches_the_reference_implementation(rng):
    text_image = np.repeat(np.arange(40), 5)
    sims = rng.normal(size=(40, 200)) + 1.5 * (text_image[None, :] == np.arange(40)[:, None])
    ours = retrieval_metrics(sims, text_image).as_dict()
    reference = ncr_reference(sims, text_image)
    for key, value in reference.items():
        assert ours[key] == pytest.approx(value)


def test_ties_count_against_the_query():
    flat = np.zeros((3, 3))
    assert recall_at_k(flat, np.eye(3, dtype=bool), ks=(1, 3)) == {1: 0.0, 3: 100.0}


def test_text_identity_counts_duplicate_captions_as_hits():
    # Captions 0 and 2 have the same text ("gramastar"), on images 0 and 1.
    text_image = np.array([0, 1, 1])
    text_group = np.array([0, 1, 0])
    sims = np.array([[0.1, 0.2, 0.9],   # image 0 retrieves caption 2: same text as its caption 0
                     [0.5, 0.1, 0.2]])  # image 1's best is caption 0: same text as its caption 2
    strict = retrieval_metrics(sims, text_image, ks=(1,))
    identity = retrieval_metrics(sims, text_image, text_group, ks=(1,))
    assert strict.i2t[1] == 0.0 and identity.i2t[1] == 100.0
    # Every caption ranks the other image first; by identity, captions 0 and 2 ("gramastar")
    # are relevant to both images.
    assert strict.t2i[1] == 0.0 and identity.t2i[1] == pytest.approx(200 / 3)
    rel = relevance(text_image, 2, text_group)
    assert rel.tolist() == [[True, False, True], [True, True, True]]


def test_blocks_do_not_change_the_result(rng, monkeypatch):
    import ncclean.evaluate.retrieval as retrieval

    text_image = np.repeat(np.arange(30), 2)
    sims = rng.normal(size=(30, 60))
    whole = retrieval_metrics(sims, text_image).as_dict()
    monkeypatch.setattr(retrieval, "_BLOCK", 7)
    assert retrieval_metrics(sims, text_image).as_dict() == whole


def test_a_query_with_no_relevant_item_is_refused():
    # Row 2 is an image with no caption in the test set: it is no query, and averaging it in
    # would count it as a miss at K <= 3 and a hit at K > 3.
    sims = np.array([[0.9, 0.1, 0.2], [0.1, 0.8, 0.3], [0.0, 0.0, 0.0]])
    relevant = np.array([[True, False, False], [False, True, True], [False, False, False]])
    with pytest.raises(ValueError, match="1 of 3 queries have no relevant item"):
        recall_at_k(sims, relevant)
    assert recall_at_k(sims[:2], relevant[:2], ks=(1,)) == {1: 100.0}
