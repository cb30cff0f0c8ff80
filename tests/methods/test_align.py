import numpy as np
import pytest

from ncclean.errors import BadOptionError
from ncclean.evaluate.detection import detection_metrics
from ncclean.methods.align import fit_alignment


def two_encoders(rng, n=400, noisy=100):
    """Images and captions that see one 6-d latent through different random maps and widths;
    the first ``noisy`` captions belong to other images."""
    latent = rng.normal(size=(n, 6))
    images = latent @ rng.normal(size=(6, 24)) + 0.3 * rng.normal(size=(n, 24))
    texts = latent @ rng.normal(size=(6, 10)) + 0.3 * rng.normal(size=(n, 10))
    texts[:noisy] = texts[rng.permutation(noisy)[::-1] + n - noisy]
    truth = np.arange(n) < noisy
    return images.astype(np.float32), texts.astype(np.float32), truth


def test_the_shared_space_ranks_mismatched_pairs_below_matched_ones(rng):
    images, texts, truth = two_encoders(rng)
    pairs = np.arange(len(images))
    alignment = fit_alignment(images, texts, pairs, pairs, dims=6, ridge=0.1)
    a, b = alignment.project_images(images), alignment.project_texts(texts)
    assert a.shape == b.shape == (len(images), 6) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    similarity = (a * b).sum(1)
    assert detection_metrics(truth, similarity).auroc > 0.95
    # raw cosine is not even defined here (24 against 10 wide): the alignment is what scores


def test_every_pair_counts_once_whatever_the_tables_share(rng):
    images, texts, _ = two_encoders(rng, n=60, noisy=0)
    image_group = rng.integers(0, 20, size=150)  # 20 images, most in several pairs
    text_group = rng.integers(0, 60, size=150)
    shared = fit_alignment(images[:20], texts, image_group, text_group, dims=4, ridge=1.0)
    spelled = fit_alignment(images[image_group], texts[text_group], np.arange(150),
                            np.arange(150), dims=4, ridge=1.0)
    assert np.allclose(shared.correlations, spelled.correlations, atol=1e-5)
    # the same directions, each up to its sign, and the same cosines
    assert np.allclose(np.abs(shared.project_images(images[:5])),
                       np.abs(spelled.project_images(images[:5])), atol=1e-4)
    assert np.allclose(shared.pair_cosine(images, texts, np.arange(5), np.arange(5)),
                       spelled.pair_cosine(images, texts, np.arange(5), np.arange(5)), atol=1e-4)


def test_dims_are_capped_at_the_narrower_width_and_recorded(rng):
    images, texts, _ = two_encoders(rng, n=50, noisy=0)
    pairs = np.arange(50)
    alignment = fit_alignment(images, texts, pairs, pairs, dims=128)
    assert alignment.dims == 10
    record = alignment.describe()
    assert record["dims"] == 10 and record["ridge"] == 100.0
    assert record["top_correlations"] == sorted(record["top_correlations"], reverse=True)


@pytest.mark.parametrize("dims, ridge", [(0, 1.0), (4, -1.0), (4, 0.0)])
def test_bad_settings_are_refused(rng, dims, ridge):
    images, texts, _ = two_encoders(rng, n=20, noisy=0)
    with pytest.raises(BadOptionError):
        fit_alignment(images, texts, np.arange(20), np.arange(20), dims=dims, ridge=ridge)


def test_half_precision_vectors_fit_and_project_as_full_precision_ones_do(rng):
    images, texts, _ = two_encoders(rng, n=80, noisy=0)
    pairs = np.arange(80)
    half = fit_alignment(images.astype(np.float16), texts.astype(np.float16), pairs, pairs, dims=4)
    full = fit_alignment(images, texts, pairs, pairs, dims=4)
    a = half.project_images(images.astype(np.float16), np.float16)
    b = half.project_texts(texts.astype(np.float16), np.float16)
    assert a.dtype == b.dtype == np.float16
    similarity = (a.astype(np.float32) * b).sum(1)
    expected = (full.project_images(images) * full.project_texts(texts)).sum(1)
    assert np.allclose(similarity, expected, atol=1e-2)  # directions' signs may differ


def test_pairs_of_one_image_or_one_caption_cannot_be_aligned_and_say_so(rng):
    from ncclean.methods.align import pair_sums, unalignable

    images, texts, _ = two_encoders(rng, n=40, noisy=0)
    pairs = np.arange(40)
    one = np.zeros(40, dtype=np.int64)
    assert unalignable(pair_sums(images, texts, pairs, pairs)) is None
    assert unalignable(pair_sums(images, texts, one, pairs)) == "pairs whose images differ"
    assert unalignable(pair_sums(images, texts, pairs, one)) == "pairs whose captions differ"
    assert unalignable(pair_sums(images, texts, pairs[:1], pairs[:1])) == "at least two pairs"
    # a unit image vector repeated (the default pipeline on captions of one picture) broke the
    # whitening's Cholesky factor; now it is refused with the reason before any fit
    unit = images / np.linalg.norm(images, axis=1, keepdims=True)
    with pytest.raises(BadOptionError, match="needs pairs whose images differ"):
        fit_alignment(unit, texts, one[:4], pairs[:4])


def test_shared_fits_cut_one_solution_to_each_width(rng):
    from ncclean.methods.align import alignment_from_sums, pair_sums, shared_fits

    images, texts = rng.normal(size=(60, 12)), rng.normal(size=(60, 9))
    pairs = np.arange(60)
    moments = pair_sums(images, texts, pairs, pairs)
    alone = {dims: alignment_from_sums(moments, dims, 1.0) for dims in (2, 5)}
    with shared_fits(8):
        shared = {dims: alignment_from_sums(pair_sums(images, texts, pairs, pairs), dims, 1.0)
                  for dims in (2, 5)}
        other_ridge = alignment_from_sums(moments, 5, 3.0)
    for dims in (2, 5):
        assert shared[dims].dims == dims
        np.testing.assert_allclose(shared[dims].image_projection, alone[dims].image_projection,
                                   atol=1e-6)
        np.testing.assert_allclose(shared[dims].correlations, alone[dims].correlations)
    assert not np.allclose(other_ridge.correlations, shared[5].correlations)


def test_shared_fits_know_a_set_of_pairs_by_its_tables_and_indices(rng, monkeypatch):
    # the same pairs summed again (from a copy of a table, or as the whole less a fold) reuse
    # one solve without hashing the moments; other pairings or values get their own
    from ncclean.methods import align

    images, texts = rng.normal(size=(60, 12)), rng.normal(size=(60, 9))
    pairs = np.arange(60)
    solves = []
    solve = align._solve
    monkeypatch.setattr(align, "_solve", lambda *args: solves.append(args[1]) or solve(*args))
    monkeypatch.setattr(align, "_digest", lambda moments: pytest.fail("moments hashed"))

    def fold(table):
        whole = align.pair_sums(table, texts, pairs, pairs)
        return whole - align.pair_sums(table, texts, pairs[:10], pairs[:10])

    changed = images.copy()
    changed[0, 0] += 1e-9
    with align.shared_fits(8):
        wide = align.alignment_from_sums(align.pair_sums(images, texts, pairs, pairs), 5, 1.0)
        narrow = align.alignment_from_sums(align.pair_sums(images.copy(), texts, pairs, pairs),
                                           2, 1.0)
        for table in (images, images.copy()):
            align.alignment_from_sums(fold(table), 5, 1.0)
        align.alignment_from_sums(align.pair_sums(images, texts, pairs, pairs[::-1].copy()),
                                  5, 1.0)
        align.alignment_from_sums(align.pair_sums(changed, texts, pairs, pairs), 5, 1.0)
    assert solves == [8, 8, 8, 8]
    np.testing.assert_array_equal(narrow.image_projection, wide.image_projection[:, :2])
    assert align.pair_sums(images, texts, pairs, pairs).source is None  # outside the context


def textbook_cca(images, texts, dims, ridge):
    """The ridge CCA written out: each side whitened by the inverse square root of its shrunk
    covariance (the ridge relative to the mean eigenvalue over the side's whole width)."""
    def inverse_root(cov):
        shrunk = cov + ridge * np.trace(cov) / len(cov) * np.eye(len(cov))
        values, vectors = np.linalg.eigh(shrunk)
        return vectors @ np.diag(values ** -0.5) @ vectors.T

    x, y = images - images.mean(0), texts - texts.mean(0)
    w_x, w_y = inverse_root(x.T @ x / len(x)), inverse_root(y.T @ y / len(y))
    left, correlations, right_t = np.linalg.svd(w_x @ (x.T @ y / len(x)) @ w_y)
    return (images.mean(0), texts.mean(0), w_x @ left[:, :dims], w_y @ right_t[:dims].T,
            correlations[:dims])


def test_a_table_shorter_than_its_width_is_fitted_as_the_whole_width_would_be(rng):
    # 40 images of 96 features and 40 captions of 64: the fit runs in a basis of the rows, and
    # gives the written-out CCA's correlations and cosines, also for vectors outside the rows
    latent = rng.normal(size=(60, 5))
    images = (latent @ rng.normal(size=(5, 96)) + rng.normal(size=(60, 96))).astype(np.float32)
    texts = (latent @ rng.normal(size=(5, 64)) + rng.normal(size=(60, 64))).astype(np.float32)
    pairs = np.arange(40)
    alignment = fit_alignment(images[:40], texts[:40], pairs, pairs, dims=12, ridge=3.0)
    image_mean, text_mean, a, b, correlations = textbook_cca(
        images[:40].astype(np.float64), texts[:40].astype(np.float64), 12, 3.0)
    np.testing.assert_allclose(alignment.correlations, correlations, rtol=1e-6)

    def cosine(x, y):
        return (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)

    expected = cosine((images - image_mean) @ a, (texts - text_mean) @ b)
    got = (alignment.project_images(images) * alignment.project_texts(texts)).sum(1)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_directions_that_correlate_nothing_are_not_kept(rng):
    # 30 pairs correlate in at most 29 directions; a wider fit keeps those alone
    images, texts = rng.normal(size=(30, 64)), rng.normal(size=(30, 48))
    pairs = np.arange(30)
    alignment = fit_alignment(images, texts, pairs, pairs, dims=40, ridge=1.0)
    assert alignment.dims == 29 and alignment.correlations[-1] > 1e-3
    spelled = fit_alignment(np.tile(images, (3, 1)), np.tile(texts, (3, 1)), pairs, pairs,
                            dims=40, ridge=1.0)  # tables as long as they are wide: no basis
    assert spelled.dims == 29
    np.testing.assert_allclose(spelled.correlations, alignment.correlations, rtol=1e-5)


def test_moments_of_different_bases_do_not_subtract(rng):
    from ncclean.methods.align import pair_sums

    images, texts = rng.normal(size=(20, 32)), rng.normal(size=(20, 24))
    pairs = np.arange(20)
    whole = pair_sums(images, texts, pairs, pairs)
    part = pair_sums(images, texts, pairs[:5], pairs[:5])
    assert part.bases[0] is whole.bases[0]  # one basis per table while it lives
    assert (whole - part).count == 15
    with pytest.raises(ValueError, match="different bases"):
        whole - pair_sums(images[::-1].copy(), texts, pairs, pairs)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("repeat", [1, 3])  # tables shorter than wide (a basis) or not
def test_a_ridge_in_the_covariances_rounding_is_refused_with_the_fix(seed, repeat):
    # 20 pairs of 32- and 24-wide vectors: below the floor the whitening fails or overfits by
    # the luck of rounding, so the fit is refused whatever the rounding does
    rng = np.random.default_rng(seed)
    images, texts = rng.normal(size=(20, 32)), rng.normal(size=(20, 24))
    pairs = np.arange(20)
    with pytest.raises(BadOptionError, match="align_ridge must be at least 1e-06 .*got 1e-30"):
        fit_alignment(np.tile(images, (repeat, 1)), np.tile(texts, (repeat, 1)), pairs, pairs,
                      dims=4, ridge=1e-30)
    fitted = fit_alignment(np.tile(images, (repeat, 1)), np.tile(texts, (repeat, 1)), pairs,
                           pairs, dims=4, ridge=1e-6)
    assert fitted.correlations[0] <= 1


def test_offset_vectors_keep_no_more_directions_than_their_pairs_allow(rng):
    # vectors far from zero (as ImageNet features are) round their float32 products; a fit of
    # 30 pairs still keeps at most 29 directions, in a basis or not
    images, texts = rng.normal(size=(30, 64)) + 10, rng.normal(size=(30, 48)) + 10
    pairs = np.arange(30)
    short = fit_alignment(images, texts, pairs, pairs, dims=40, ridge=1.0)
    long = fit_alignment(np.tile(images, (3, 1)), np.tile(texts, (3, 1)), pairs, pairs,
                         dims=40, ridge=1.0)
    assert short.dims == long.dims == 29
    np.testing.assert_allclose(short.correlations, long.correlations, rtol=1e-4)


def test_a_fold_left_out_of_moments_in_a_basis_is_fitted_as_its_pairs_alone(rng):
    # the whole less a fold (caption folds, cross-fitting) subtracts sums taken in one basis;
    # half-precision tables read as their float32 values
    from ncclean.methods.align import alignment_from_sums, pair_sums

    images = (rng.normal(size=(50, 96)) + 3).astype(np.float16)
    texts = (rng.normal(size=(40, 64)) + 3).astype(np.float16)
    image_group, text_group = rng.integers(0, 50, size=80), rng.integers(0, 40, size=80)
    held = np.arange(80) < 20
    whole = pair_sums(images, texts, image_group, text_group)
    assert all(basis is not None for basis in whole.bases)
    left = whole - pair_sums(images, texts, image_group[held], text_group[held])
    fold = alignment_from_sums(left, 8, 2.0)
    alone = fit_alignment(images.astype(np.float32), texts.astype(np.float32),
                          image_group[~held], text_group[~held], dims=8, ridge=2.0)
    np.testing.assert_allclose(fold.correlations, alone.correlations, rtol=1e-5)
    rows = np.arange(40)
    np.testing.assert_allclose(fold.pair_cosine(images, texts, rows, rows),
                               alone.pair_cosine(images, texts, rows, rows), atol=1e-4)
