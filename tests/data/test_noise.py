import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclean import api
from ncclean.data.noise import (
    apply_index,
    derange_by_value,
    noisy_ground_truth,
    sample_noise,
)
from ncclean.errors import BadOptionError, IndexFileError, OutputError, SchemaError

# A corpus shape: how many captions each image has (images in order, captions next to each other).
caption_counts = st.lists(st.integers(min_value=1, max_value=5), min_size=4, max_size=60)
ratios = st.floats(min_value=0.0, max_value=1.0)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def groups_of(counts: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


def feasible(chosen_groups: np.ndarray) -> bool:
    """Every chosen caption can move to another image iff no image holds over half of them."""
    if len(chosen_groups) == 0:
        return True
    return np.bincount(chosen_groups).max() * 2 <= len(chosen_groups)


@settings(max_examples=200, deadline=None)
@given(caption_counts, ratios, seeds)
def test_per_caption_moves_the_requested_number(counts, ratio, seed):
    group = groups_of(counts)
    index = sample_noise(group, ratio, "per-caption", seed)
    requested = int(ratio * len(group))
    moved = index != group
    # No pair is lost or duplicated: the images are a permutation of the original ones.
    assert len(index) == len(group)
    assert sorted(index.tolist()) == sorted(group.tolist())
    assert moved.sum() <= requested
    # The captions sample_noise chooses are the first draw of its generator.
    chosen = np.random.default_rng(seed).permutation(len(group))[:requested]
    assert not moved[np.setdiff1d(np.arange(len(group)), chosen)].any()
    if feasible(group[chosen]):
        assert abs(int(moved.sum()) - requested) <= 1
    assert np.array_equal(index, sample_noise(group, ratio, "per-caption", seed))


@settings(max_examples=200, deadline=None)
@given(caption_counts, ratios, seeds)
def test_per_image_moves_whole_images(counts, ratio, seed):
    group = groups_of(counts)
    index = sample_noise(group, ratio, "per-image", seed)
    n_images = len(counts)
    requested = int(ratio * n_images)
    moved_images = set(group[index != group].tolist())
    if requested >= 2:
        assert len(moved_images) == requested  # a derangement of the chosen images
    else:
        assert not moved_images  # one image cannot move anywhere but onto itself
    for image in moved_images:  # all its captions moved, together, to one other image
        targets = set(index[group == image].tolist())
        assert len(targets) == 1 and image not in targets
    assert np.array_equal(index, sample_noise(group, ratio, "per-image", seed))


def test_different_seeds_give_different_indices():
    group = groups_of([5] * 100)
    assert not np.array_equal(sample_noise(group, 0.5, "per-caption", 0),
                              sample_noise(group, 0.5, "per-caption", 1))


def test_derangement_by_value_avoids_fixed_values(rng):
    values = np.repeat(np.arange(10), 5)
    shuffled = derange_by_value(values, rng)
    assert sorted(shuffled.tolist()) == sorted(values.tolist())
    assert not (shuffled == values).any()


def test_bad_ratio_and_protocol():
    with pytest.raises(BadOptionError, match=r"\[0, 1\]"):
        sample_noise(np.arange(4), 1.5, "per-caption", 0)
    with pytest.raises(BadOptionError, match="per-caption, per-image"):
        sample_noise(np.arange(4), 0.5, "sideways", 0)


def test_identical_text_is_not_noise():
    group = np.array([0, 1, 2, 3])
    text = np.array([0, 0, 1, 2])  # images 0 and 1 are both captioned "gramastar"
    index = np.array([1, 0, 3, 2])
    assert noisy_ground_truth(index, group, text).tolist() == [False, False, True, True]


def test_apply_index_accepts_both_published_layouts():
    group = np.repeat(np.arange(3), 2)
    per_caption = np.array([0, 2, 1, 1, 2, 0])
    assert apply_index(per_caption, group).tolist() == per_caption.tolist()
    per_image = np.array([1, 2, 0], dtype=np.int32)
    assert apply_index(per_image, group).tolist() == [1, 1, 2, 2, 0, 0]
    with pytest.raises(IndexFileError, match="needs 6 .* or 3"):
        apply_index(np.zeros(4, dtype=np.int64), group)
    with pytest.raises(IndexFileError, match="3 images"):
        apply_index(np.array([0, 0, 0, 0, 0, 5]), group)
    with pytest.raises(IndexFileError, match="1-D integer"):
        apply_index(np.zeros(6), group)


# --------------------------------------------------------------------------- the whole command


def test_inject_noise_moves_images_and_keeps_every_row(shapes, tmp_path):
    out = tmp_path / "noisy.parquet"
    summary = api.inject_noise(shapes, out, ratio=0.4, seed=3)
    clean, noisy = pq.read_table(shapes), pq.read_table(out)
    assert noisy.column_names == clean.column_names + ["original_image_id", "noisy_gt"]
    assert noisy.column("id").to_pylist() == clean.column("id").to_pylist()
    assert noisy.column("caption").to_pylist() == clean.column("caption").to_pylist()
    assert noisy.column("scene").to_pylist() == clean.column("scene").to_pylist()
    assert noisy.column("original_image_id").to_pylist() == clean.column("image_id").to_pylist()
    assert summary.requested == 80 and summary.moved == 80

    # The image bytes travel with image_id: each row's image is its new image's picture.
    picture = dict(zip(clean.column("image_id").to_pylist(), clean.column("image").to_pylist()))
    for image_id, image in zip(noisy.column("image_id").to_pylist(),
                               noisy.column("image").to_pylist()):
        assert picture[image_id] == image
    moved = np.array(noisy.column("image_id").to_pylist()) != \
        np.array(clean.column("image_id").to_pylist())
    gt = np.array(noisy.column("noisy_gt").to_pylist())
    assert gt.sum() == summary.noisy and not gt[~moved].any()
    assert abs(summary.realised_ratio - 0.4) <= 0.02


def test_same_seed_same_bytes_and_the_index_reapplies(shapes, tmp_path):
    first = api.inject_noise(shapes, tmp_path / "a.parquet", ratio=0.5, seed=1)
    api.inject_noise(shapes, tmp_path / "b.parquet", ratio=0.5, seed=1)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    again = api.inject_noise(shapes, tmp_path / "c.parquet", index=first.index_file)
    assert (tmp_path / "c.parquet").read_bytes() == (tmp_path / "a.parquet").read_bytes()
    assert again.protocol == "index" and again.noisy == first.noisy
    assert (tmp_path / "a.parquet.json").exists()


def test_without_image_ids_groups_come_from_content(small_pairs, tmp_path):
    out = tmp_path / "noisy.parquet"
    summary = api.inject_noise(small_pairs, out, ratio=1.0, seed=0, move_with_image=["note"])
    table = pq.read_table(out)
    assert table.column_names == ["id", "image", "caption", "note", "image_id",
                                  "original_image_id", "noisy_gt"]
    assert table.column("original_image_id").to_pylist() == [0, 0, 1, 2, 2, 1]
    assert summary.moved == 6
    # "note" moved with the image: it now belongs to the first row of the new image.
    first_note = {0: 1, 1: 3, 2: 4}
    assert table.column("note").to_pylist() == [first_note[g] for g in
                                                table.column("image_id").to_pylist()]


def test_vectors_named_as_embed_names_them_move_with_their_image(small_pairs, tmp_path):
    """``ncclean embed`` adds ``image_emb`` beside the images: noise injected without naming it
    must still move it, or the vectors would describe the old pictures."""
    table = pq.read_table(small_pairs)
    vectors = [[float(i), 0.0] for i in range(table.num_rows)]
    table = table.append_column("image_emb", pa.array(vectors, pa.list_(pa.float32())))
    pq.write_table(table, tmp_path / "embedded.parquet")
    summary = api.inject_noise(tmp_path / "embedded.parquet", tmp_path / "noisy.parquet",
                               ratio=1.0, seed=0)
    noisy = pq.read_table(tmp_path / "noisy.parquet")
    assert summary.image_columns == ("image", "image_emb")
    first_vector = {0: [0.0, 0.0], 1: [2.0, 0.0], 2: [3.0, 0.0]}
    assert noisy.column("image_emb").to_pylist() == [first_vector[g] for g in
                                                     noisy.column("image_id").to_pylist()]
    # moved rows carry another image's vector
    assert noisy.column("image_emb").to_pylist() != vectors

    # naming a vector column moves it, image_emb and the pictures too
    table = table.append_column("other_emb", pa.array(vectors, pa.list_(pa.float32())))
    pq.write_table(table, tmp_path / "two.parquet")
    summary = api.inject_noise(tmp_path / "two.parquet", tmp_path / "noisy2.parquet", ratio=1.0,
                               seed=0, image_emb_col="other_emb")
    noisy = pq.read_table(tmp_path / "noisy2.parquet")
    assert set(summary.image_columns) == {"image", "other_emb", "image_emb"}
    assert noisy.column("other_emb").to_pylist() == noisy.column("image_emb").to_pylist()
    images = table.column("image").to_pylist()  # each vector names the row it came from
    assert noisy.column("image").to_pylist() == [images[int(vector[0])] for vector in
                                                 noisy.column("other_emb").to_pylist()]

    # a column named image_emb that is read as the caption side stays with its caption
    summary = api.inject_noise(tmp_path / "two.parquet", tmp_path / "noisy3.parquet", ratio=1.0,
                               seed=0, image_emb_col="other_emb", text_emb_col="image_emb")
    assert "image_emb" not in summary.image_columns
    assert pq.read_table(tmp_path / "noisy3.parquet").column("image_emb").to_pylist() == vectors


def test_per_image_protocol_end_to_end(shapes, tmp_path):
    summary = api.inject_noise(shapes, tmp_path / "n.parquet", ratio=0.5, protocol="per-image")
    assert summary.unit == "images" and summary.requested == 20
    assert summary.moved == 100  # 20 images x 5 captions


def test_inject_noise_refuses_to_overwrite_its_input(shapes):
    before = shapes.read_bytes()
    with pytest.raises(OutputError):
        api.inject_noise(shapes, shapes, ratio=0.5)
    assert shapes.read_bytes() == before


def test_a_noisy_file_is_not_injected_again(shapes, tmp_path):
    api.inject_noise(shapes, tmp_path / "n.parquet", ratio=0.3, seed=0)
    with pytest.raises(SchemaError, match="already holds injected noise"):
        api.inject_noise(tmp_path / "n.parquet", tmp_path / "nn.parquet", ratio=0.3, seed=5)
    assert not (tmp_path / "nn.parquet").exists()
    clean = pq.read_table(tmp_path / "n.parquet")  # a noisy_gt of no noisy pair is replaced
    clean = clean.set_column(clean.schema.get_field_index("noisy_gt"), "noisy_gt",
                             pa.array([False] * clean.num_rows))
    pq.write_table(clean, tmp_path / "labelled.parquet")
    assert api.inject_noise(tmp_path / "labelled.parquet", tmp_path / "nn.parquet",
                            ratio=0.3, seed=5).noisy > 0


def test_a_bad_index_file(shapes, tmp_path):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"nonsense")
    with pytest.raises(IndexFileError, match="cannot read noise index"):
        api.inject_noise(shapes, tmp_path / "o.parquet", index=bad)
    (tmp_path / "labels.csv").write_text("id,label\na,match\n")
    with pytest.raises(IndexFileError, match="labels.csv: not a .npz or .npy file"):
        api.inject_noise(shapes, tmp_path / "o.parquet", index=tmp_path / "labels.csv")


# ------------------------------------------------------------------------------- index files


def test_index_files_are_byte_identical_and_old_npy_files_still_apply(shapes, tmp_path):
    from ncclean.data.noise import read_index

    first = api.inject_noise(shapes, tmp_path / "a.parquet", ratio=0.3, seed=2)
    api.inject_noise(shapes, tmp_path / "b.parquet", ratio=0.3, seed=2)
    assert first.index_file.name == "a.parquet.noise.npz"
    assert first.index_file.read_bytes() == (tmp_path / "b.parquet.noise.npz").read_bytes()
    saved = read_index(first.index_file)
    assert saved.ids is not None and saved.image_group is not None and saved.captions is not None
    np.save(tmp_path / "old.npy", saved.caption_to_image)  # what ncclean 0.1 wrote
    api.inject_noise(shapes, tmp_path / "c.parquet", index=tmp_path / "old.npy")
    assert (tmp_path / "c.parquet").read_bytes() == (tmp_path / "a.parquet").read_bytes()


def test_align_index_checks():
    import pyarrow as pa

    from ncclean.data.noise import SavedIndex, align_index, caption_digests

    group = np.repeat(np.arange(4), 2)
    index = np.array([1, 0, 0, 2, 3, 2, 3, 1])  # a noisy layout on images stored one by one
    assert align_index(SavedIndex(index), group).tolist() == index.tolist()  # published, in order
    # Rows shuffled under a published index: nearly every caption would move.
    order = np.array([7, 2, 5, 0, 3, 6, 1, 4])
    shuffled_group = np.unique(group[order], return_inverse=True)[1]
    with pytest.raises(IndexFileError, match="not in the order it was made for"):
        align_index(SavedIndex(index), np.array([0, 1, 2, 3, 0, 1, 2, 3]))
    # One of ncclean's own: ids follow the rows, wherever they went.
    ids = pa.array([f"r{i}" for i in range(8)])
    own = SavedIndex(index, group, np.array(ids.to_pylist()))
    moved = align_index(own, shuffled_group, ids.take(pa.array(order)))
    # Row k now holds old row order[k]; its new image is the one old row order[k] was sent to.
    old_image_of_group = {int(shuffled_group[k]): int(group[order[k]]) for k in range(8)}
    assert [old_image_of_group[int(g)] for g in moved] == index[order].tolist()
    # Without ids, the captions tell: the same grouping but other captions in the rows.
    captions = [f"c{i}" for i in range(8)]
    by_caption = SavedIndex(index, group, None, caption_digests(captions))
    assert align_index(by_caption, group, None, captions).tolist() == index.tolist()
    with pytest.raises(IndexFileError, match=r"other captions in these rows \(8 of 8 differ"):
        align_index(by_caption, group, None, captions[::-1])
    with pytest.raises(IndexFileError, match="grouped differently"):
        align_index(by_caption, shuffled_group, None, captions)
