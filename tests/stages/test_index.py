"""The stages' nearest-neighbour index: used beyond the search budget only, agrees with the exact
search, the same bytes twice, and a seeded sample with a note when faiss is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import ncclean.stages as stages
import ncclean.stages.index as index_module
from ncclean.models.features import Features
from ncclean.stages.index import ReferenceIndex, best_reference, reference_index
from ncclean.stages.pseudocaption import DonorSpace, pseudo_captions
from ncclean.stages.significance import significance
from ncclean.train.scoring import Embeddings

pytest.importorskip("faiss")


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def separated(n=300, d=16, seed=0):
    """Captions around 30 well-separated topics; each image near one caption of its pair."""
    rng = np.random.default_rng(seed)
    topics = unit(rng.standard_normal((30, d)))
    texts = unit(topics[rng.integers(0, 30, n)] + 0.2 * rng.standard_normal((n, d)))
    images = unit(texts + 0.1 * rng.standard_normal((n, d)))
    features = Features(rows=np.arange(n), image_group=np.arange(n), text_group=np.arange(n),
                        image_data=images, text_data=texts)
    return Embeddings(images=images, texts=texts), features, rng.random(n) < 0.3


@pytest.fixture
def small_budget(monkeypatch):
    """Every search is over budget (the index's), while a sample may still take everything."""
    monkeypatch.setattr(index_module, "SEARCH_BUDGET", 10)
    index_module._CACHE.clear()
    yield
    index_module._CACHE.clear()


def donors_of(embeddings, features, noisy, seed=0):
    space = DonorSpace(query=embeddings.images, key=embeddings.texts, name="t", min_score=-1.0)
    return pseudo_captions(space, features, noisy, ~noisy, seed=seed, cap=False)


def test_within_the_budget_the_search_is_exact_and_the_record_unchanged():
    donor, _, report = donors_of(*separated())
    assert "search" not in report and report["searched_donors"] == report["n_donors"]


def test_beyond_the_budget_the_index_finds_the_exact_best_donor(small_budget, monkeypatch):
    embeddings, features, noisy = separated()
    built = []
    monkeypatch.setattr(index_module, "ReferenceIndex",
                        lambda refs: built.append(len(refs)) or ReferenceIndex(refs))
    donor, score, report = donors_of(embeddings, features, noisy)
    assert report["search"] == "index" and built == [int((~noisy).sum())]
    assert report["searched_donors"] == report["n_donors"]  # no sample: every donor searched
    donors = np.flatnonzero(~noisy)
    for i in np.flatnonzero(noisy):
        sims = embeddings.texts[donors] @ embeddings.images[i]
        assert donor[i] == donors[sims.argmax()]
        assert score[i] == pytest.approx(sims.max(), abs=1e-5)


def test_same_references_same_index_and_same_answers(small_budget):
    embeddings, features, noisy = separated(n=3000)
    index = ReferenceIndex(embeddings.texts)
    assert 1 < index.lists.nprobe < index.n_lists  # a query scans some of the lists
    serialize = index_module._faiss().serialize_index
    assert np.array_equal(serialize(index.lists),
                          serialize(ReferenceIndex(embeddings.texts).lists))
    first = donors_of(embeddings, features, noisy, seed=4)
    index_module._CACHE.clear()  # built again from scratch
    again = donors_of(embeddings, features, noisy, seed=4)
    assert first[0].tobytes() == again[0].tobytes() and first[1].tobytes() == again[1].tobytes()


def test_scanning_some_lists_finds_nearly_every_best_donor(small_budget):
    embeddings, features, noisy = separated(n=3000)
    indexed = donors_of(embeddings, features, noisy)[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_module, "SEARCH_BUDGET", 10**9)
        exact = donors_of(embeddings, features, noisy)[0]
    assert (indexed[noisy] == exact[noisy]).mean() > 0.98


def test_the_index_is_built_once_per_reference_array(small_budget):
    references = unit(np.random.default_rng(1).standard_normal((50, 8)))
    assert reference_index(references) is reference_index(references)
    assert reference_index(references.copy()) is not reference_index(references)


def test_own_label_excluded_even_when_every_candidate_has_it(small_budget, monkeypatch):
    monkeypatch.setattr(index_module, "CANDIDATES", 2)
    rng = np.random.default_rng(2)
    references = unit(rng.standard_normal((40, 8)))
    labels = np.zeros(40, dtype=np.int64)
    labels[-1] = 1  # only the last reference may be chosen for a query labelled 0
    queries = references[:3].copy()
    best, score = best_reference(ReferenceIndex(references), queries, np.zeros(3, np.int64),
                                 labels)
    assert best.tolist() == [39, 39, 39]
    assert np.allclose(score, queries @ references[39], atol=1e-6)


def test_without_faiss_a_seeded_sample_and_a_note(small_budget, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError
    monkeypatch.setattr(stages, "SEARCH_BUDGET", 100 * 40)  # a sample of 40 donors
    monkeypatch.setattr(stages, "MIN_REFERENCES", 1)
    embeddings, features, noisy = separated()
    first = donors_of(embeddings, features, noisy, seed=3)
    again = donors_of(embeddings, features, noisy, seed=3)
    report = first[2]
    assert report["search"] == "sample" and "faiss" in report["search_note"]
    assert report["searched_donors"] == stages.reference_cap(int(noisy.sum())) < \
        report["n_donors"]
    assert np.array_equal(first[0], again[0])


def test_the_specificity_pool_stays_within_the_budget_with_faiss(small_budget, monkeypatch):
    monkeypatch.setattr(stages, "SEARCH_BUDGET", 100 * 40)
    monkeypatch.setattr(stages, "MIN_REFERENCES", 1)
    embeddings, features, _ = separated()
    _, report = significance(None, features, np.ones(300), np.ones(300, bool),
                             embeddings=embeddings)
    assert report["pool"] == 4000 // 300  # a seeded pool, searched exactly, index or not


def test_the_index_searches_a_bounded_multiple_of_the_budgets_donors(small_budget, monkeypatch):
    monkeypatch.setattr(stages, "SEARCH_BUDGET", 100 * 40)
    monkeypatch.setattr(stages, "MIN_REFERENCES", 1)
    assert index_module.reference_limit(100) == index_module.INDEX_GAIN * 40
    embeddings, features, noisy = separated()
    report = donors_of(embeddings, features, noisy, seed=3)[2]
    assert report["search"] == "index" and "search_note" not in report
    assert report["searched_donors"] == min(report["n_donors"], index_module.INDEX_GAIN *
                                            stages.reference_cap(int(noisy.sum())))
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert index_module.reference_limit(100) == 40
