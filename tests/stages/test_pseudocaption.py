import numpy as np
import pytest

from ncclean.models.features import Features
from ncclean.stages.pseudocaption import DonorSpace, matcher_space, pseudo_captions
from ncclean.train.scoring import Embeddings


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def setup():
    # 4 images, 4 texts; pairs 0-2 clean and matching (pair 2 less well), pair 3 shows image 3
    # (close to image 0) with a wrong caption.
    images = unit([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.9, 0.1, 0]])
    texts = unit([[1, 0.05, 0], [0, 1, 0.05], [0.3, 0, 1], [0, 0.2, 1]])
    features = Features(rows=np.arange(4), image_group=np.arange(4), text_group=np.arange(4),
                        image_data=images, text_data=texts)
    return Embeddings(images=images, texts=texts), features


def test_the_best_clean_caption_for_the_image_is_suggested():
    embeddings, features = setup()
    noisy = np.array([False, False, False, True])
    donor, score, report = pseudo_captions(matcher_space(embeddings, features), features, noisy,
                                           ~noisy)
    assert donor.tolist() == [-1, -1, -1, 0]
    assert score[3] > 0.9 and np.isnan(score[:3]).all()
    assert report["suggested"] == 1 and report["n_donors"] == 3


def test_own_text_is_never_suggested_and_low_scores_are_withheld():
    embeddings, features = setup()
    features.text_group[0] = 3  # the best donor now has the noisy pair's own text
    noisy = np.array([False, False, False, True])
    donor, _, _ = pseudo_captions(matcher_space(embeddings, features), features, noisy, ~noisy)
    assert donor[3] in (1, 2)
    strict = DonorSpace(query=embeddings.images, key=embeddings.texts, name="t", min_score=0.99)
    donor, score, report = pseudo_captions(strict, features, noisy, ~noisy)
    assert donor[3] == -1 and np.isnan(score[3]) and report["suggested"] == 0


def test_a_repeated_caption_counts_once_in_the_random_caption_floor():
    # 50 clean pairs share one caption (a collection's label) that fits the 40 noisy images of
    # that collection perfectly; 31 clean captions are distinct; 5 noisy images of another kind
    # fit only one clean caption, at 0.5. Drawn per pair, the label sets the random floor at 1.0
    # and those 5 get nothing; drawn per distinct caption, as the search offers them, it counts
    # once and they get that caption.
    from ncclean.stages.pseudocaption import _random_caption_floor

    eye = np.eye(40, dtype=np.float32)
    partner = unit([0.5 * eye[1] + 0.75 ** 0.5 * eye[32]])[0]
    images = np.stack([eye[0]] * 50 + [eye[k] for k in range(2, 32)] + [eye[32]]
                      + [eye[0]] * 40 + [eye[1]] * 5)
    texts = np.stack([eye[0], *(eye[k] for k in range(2, 32)), partner, eye[39]])
    n = len(images)
    text_group = np.concatenate([np.zeros(50, int), np.arange(1, 32), np.full(45, 32)])
    features = Features(rows=np.arange(n), image_group=np.arange(n), text_group=text_group,
                        image_data=images, text_data=texts)
    space = matcher_space(Embeddings(images=images, texts=texts), features)
    noisy = np.arange(n) >= 81
    donor, score, report = pseudo_captions(space, features, noisy, ~noisy, cap=False)
    assert _random_caption_floor(space, np.flatnonzero(noisy), np.flatnonzero(~noisy), 0) > 0.99
    assert report["min_score"] < 0.5
    assert (donor[81:121] < 50).all() and (donor[121:] == 80).all()
    assert np.allclose(score[121:], 0.5)


def test_no_donors_no_suggestions():
    embeddings, features = setup()
    donor, _, report = pseudo_captions(matcher_space(embeddings, features), features,
                                       np.ones(4, bool), np.zeros(4, bool))
    assert (donor == -1).all() and report["suggested"] == 0


def test_blocked_search_matches_brute_force(rng, monkeypatch):
    import ncclean.stages.pseudocaption as module

    n, d = 300, 16
    images, texts = unit(rng.normal(size=(n, d))), unit(rng.normal(size=(n, d)))
    features = Features(rows=np.arange(n), image_group=np.arange(n), text_group=np.arange(n),
                        image_data=images, text_data=texts)
    space = DonorSpace(query=images, key=texts, name="t", min_score=-1.0)
    noisy = rng.random(n) < 0.3
    monkeypatch.setattr(module, "_BLOCK", 7)
    donor, score, _ = pseudo_captions(space, features, noisy, ~noisy)
    donors = np.flatnonzero(~noisy)
    for i in np.flatnonzero(noisy)[:20]:
        j = donors[np.argmax(texts[donors] @ images[i])]
        assert donor[i] == j and score[i] == pytest.approx(texts[j] @ images[i], abs=1e-6)


def test_search_matches_brute_force_and_samples_donors_beyond_the_budget(monkeypatch):
    import ncclean.stages.pseudocaption as module

    rng = np.random.default_rng(0)
    n = 300
    images, texts = unit(rng.standard_normal((n, 8))), unit(rng.standard_normal((60, 8)))
    features = Features(rows=np.arange(n), image_group=np.arange(n),
                        text_group=rng.integers(0, 60, n), image_data=images, text_data=texts)
    embeddings = Embeddings(images=images, texts=texts)
    noisy = rng.random(n) < 0.3
    space = DonorSpace(query=images, key=texts, name="t", by_text=True, min_score=-2.0,
                       query_index=features.image_group, key_index=features.text_group)
    donor, score, report = pseudo_captions(space, features, noisy, ~noisy, cap=False)
    donor_texts = np.unique(features.text_group[~noisy])
    for i in np.flatnonzero(noisy):
        allowed = donor_texts[donor_texts != features.text_group[i]]
        sims = texts[allowed] @ images[i]
        assert features.text_group[donor[i]] == allowed[sims.argmax()]
        assert score[i] == pytest.approx(sims.max(), abs=1e-5)
    assert report["searched_donors"] == len(donor_texts)

    monkeypatch.setattr(module, "reference_limit", lambda n_queries: 5)
    first = pseudo_captions(matcher_space(embeddings, features), features, noisy, ~noisy, seed=3)
    again = pseudo_captions(matcher_space(embeddings, features), features, noisy, ~noisy, seed=3)
    assert first[2]["searched_donors"] == 5
    assert len(np.unique(first[0][first[0] >= 0])) <= 5
    assert np.array_equal(first[0], again[0])


def test_no_caption_is_offered_to_more_than_its_share_of_the_suggestions():
    # 200 noisy images all nearest to one clean caption (a hub), each also near a caption of
    # its own kind: the hub goes to the two it fits best, the rest get their next best
    from ncclean.stages.pseudocaption import donor_cap

    rng = np.random.default_rng(1)
    n_clean, n_noisy = 100, 200
    hub = unit(np.ones((1, 16)))[0]
    texts = unit(rng.standard_normal((n_clean, 16)))
    texts[0] = hub
    images = np.concatenate([texts, unit(hub + 0.15 * rng.standard_normal((n_noisy, 16)))])
    n = n_clean + n_noisy
    features = Features(rows=np.arange(n), image_group=np.arange(n),
                        text_group=np.concatenate([np.arange(n_clean), np.arange(n_noisy) + 500]),
                        image_data=images, text_data=np.concatenate([texts, texts[:1].repeat(
                            501 + n_noisy - n_clean, 0)]))
    space = DonorSpace(query=images, key=features.text_data, name="t", by_text=True,
                       min_score=-1.0, query_index=features.image_group,
                       key_index=features.text_group)
    noisy = np.arange(n) >= n_clean
    uncapped = pseudo_captions(space, features, noisy, ~noisy, cap=False)[0]
    assert (uncapped[noisy] == 0).mean() > 0.5  # the hub, without the cap
    donor, _, report = pseudo_captions(space, features, noisy, ~noisy)
    taken = donor[noisy][donor[noisy] >= 0]
    assert np.bincount(taken).max() <= donor_cap(len(taken)) == 2
    assert report["most_uses_of_one_donor"] <= 2 and len(taken) > 100
