import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.data.corpus import read_corpus, text_groups
from ncclean.data.schema import Columns
from ncclean.errors import InvalidRowsError
from tests.helpers import png_bytes, write_parquet


def test_reads_pairs_and_groups_images_by_content(small_pairs):
    corpus = read_corpus(small_pairs)
    assert corpus.n_pairs == 6 and corpus.n_images == 3
    assert corpus.image_group.tolist() == [0, 0, 1, 2, 2, 1]
    assert corpus.ids.to_pylist() == list("abcdef")
    assert corpus.captions[0] == "a red box"
    assert corpus.valid.all() and corpus.images is None


def test_image_id_column_defines_the_groups_of_equal_images(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {
        "image_id": [7, 7, 3, None, 3],
        "image": [b"broken"] * 5,
        "caption": ["a", "b", "c", "d", "e"],
    })
    corpus = read_corpus(path)
    assert corpus.image_group.tolist() == [0, 0, 1, 2, 1]  # the null image_id is its own image
    assert corpus.ids.to_pylist() == [0, 1, 2, 3, 4]  # no id column: row numbers
    assert corpus.valid.all()  # images are not decoded unless asked
    assert corpus.image_id_splits == 0


def test_invalid_rows_are_kept_with_a_reason(tmp_path, huge_png_bytes):
    good = png_bytes()
    path = write_parquet(tmp_path / "p.parquet", {
        "id": ["a", "b", "c", "d", "e", "b"],
        "image": [good, png_bytes()[:60], huge_png_bytes, None, good, png_bytes((1, 1, 1))],
        "caption": ["ok", "corrupt png", "bomb", "no image", "   ", "dup id"],
    })
    corpus = read_corpus(path, image_size=16)
    reasons = corpus.reasons
    assert reasons[0] is None
    assert reasons[1].startswith("undecodable image")
    assert reasons[2].startswith("image too large")
    assert reasons[3] == "missing image"
    assert reasons[4] == "empty caption"
    assert reasons[5] == "duplicate id: 'b' appears earlier"
    assert corpus.n_pairs == 6  # nothing dropped
    assert corpus.images.shape == (corpus.n_images, 16, 16, 3)
    assert (corpus.images[corpus.image_group[1]] == 255).all()  # unusable images stay white
    assert corpus.invalid_counts() == {"undecodable image": 1, "image too large": 1,
                                       "missing image": 1, "empty caption": 1, "duplicate id": 1}
    with pytest.raises(InvalidRowsError, match=r"5 invalid rows .*first: row 1 \(id 'b'\)"):
        read_corpus(path, image_size=16, strict=True)


def test_strict_passes_a_clean_corpus(shapes):
    corpus = read_corpus(shapes, strict=True, image_size=32)
    assert corpus.n_pairs == 200 and corpus.n_images == 40
    assert corpus.images.shape == (40, 32, 32, 3)


def test_paths_are_relative_to_each_shard(tmp_path):
    for name, colour in (("a", (255, 0, 0)), ("b", (0, 0, 255))):
        folder = tmp_path / "corpus" / name
        (folder / "img").mkdir(parents=True)
        (folder / "img" / "x.png").write_bytes(png_bytes(colour))
        write_parquet(folder / "part.parquet", {"image": ["img/x.png", "img/missing.png"],
                                                "caption": [f"{name} one", f"{name} two"]})
    corpus = read_corpus(tmp_path / "corpus", image_size=4)
    assert corpus.n_pairs == 4 and corpus.n_images == 4  # same relative path, different files
    red, blue = corpus.images[corpus.image_group[0]], corpus.images[corpus.image_group[2]]
    assert tuple(red[2, 2]) == (255, 0, 0) and tuple(blue[2, 2]) == (0, 0, 255)
    assert corpus.reasons[1] == "missing image: no file img/missing.png"


def test_hugging_face_struct_images(tmp_path):
    (tmp_path / "a.png").write_bytes(png_bytes((0, 255, 0)))
    path = write_parquet(tmp_path / "p.parquet", {
        "image": [{"bytes": png_bytes(), "path": "ignored.png"}, {"bytes": None, "path": "a.png"}],
        "caption": ["one", "two"],
    })
    corpus = read_corpus(path, image_size=4, strict=True)
    assert tuple(corpus.images[1][1, 1]) == (0, 255, 0)


def test_embeddings_with_nan_wrong_length_and_nulls(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {
        "caption": ["a", "b", "c", "d", "e"],
        "img": pa.array([[1, 2, 3], [4, 5, 6], [1, math.nan, 3], [1, 2], None],
                        pa.list_(pa.float64())),
        "txt": pa.array([[0.5, i] for i in range(5)], pa.list_(pa.float16(), 2)),
    })
    corpus = read_corpus(path, Columns(image_emb="img", text_emb="txt"))
    assert corpus.image_emb.dtype == np.float32 and corpus.image_emb.shape == (5, 3)
    assert corpus.image_emb[1].tolist() == [4, 5, 6]
    assert corpus.text_emb.shape == (5, 2)
    assert corpus.reasons[:2] == [None, None]
    assert corpus.reasons[2] == "image embedding holds NaN or infinity"
    assert corpus.reasons[3] == "image embedding has 2 values, expected 3"
    assert corpus.reasons[4] == "missing image embedding"
    assert not corpus.image_emb[2:].any()
    assert corpus.image_group[0] != corpus.image_group[1]


def test_chinese_and_mixed_captions_round_trip(tmp_path):
    captions = ["左上角有一个红色的圆形", "a red 圆形 on the left", "  Gramastar "]
    path = write_parquet(tmp_path / "p.parquet",
                         {"image": [png_bytes()] * 3, "caption": captions})
    corpus = read_corpus(path)
    assert corpus.captions == captions


def test_a_row_with_two_problems_counts_once_as_a_row_and_under_both_kinds(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {"image": [None, png_bytes()],
                                                  "caption": ["", "fine"]})
    corpus = read_corpus(path, image_size=4)
    assert corpus.reasons[0] == "empty caption; missing image"
    assert corpus.n_invalid == 1
    assert corpus.invalid_counts() == {"empty caption": 1, "missing image": 1}


def test_text_groups_ignore_case_and_whitespace():
    groups = text_groups(["gramastar", " Gramastar", "gramastar  x", "gramastar x", "other"])
    assert groups.tolist() == [0, 0, 1, 1, 2]


def test_only_needed_columns_are_read(tmp_path, monkeypatch):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"caption": ["a", "b"], "image_id": [1, 2],
                             "image": [b"x", b"y"], "blob": [b"z" * 10, b"w"]}), path)
    seen = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, columns=None, **kwargs):
        seen.append(columns)
        return original(self, *args, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    read_corpus(path)
    # The image bytes once (each row's is hashed: rows of one image_id may differ), not "blob".
    assert seen == [["caption", "image_id", "image"]]


def test_decoded_images_are_cached_by_content(shapes, tmp_path, monkeypatch):
    import ncclean.data.corpus as corpus_module

    first = read_corpus(shapes, image_size=16, cache_dir=tmp_path)
    assert len(list((tmp_path / "images").glob("*.npy"))) == 1
    calls = []
    monkeypatch.setattr(corpus_module, "decode_images", lambda *a, **k: calls.append(1) or {})
    second = read_corpus(shapes, image_size=16, cache_dir=tmp_path)
    assert not calls  # read back, not decoded again
    assert np.array_equal(first.images, second.images)
    read_corpus(shapes, image_size=8, cache_dir=tmp_path)  # another size is another entry
    assert calls and len(list((tmp_path / "images").glob("*.json"))) == 2


def test_cached_problems_still_mark_rows(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {"image": [png_bytes(), b"bad"],
                                                  "caption": ["a", "b"]})
    for _ in range(2):
        corpus = read_corpus(path, image_size=4, cache_dir=tmp_path / "cache")
        assert corpus.reasons[0] is None and corpus.reasons[1].startswith("undecodable")


def test_fixed_size_float16_embeddings_stay_half_precision(tmp_path):
    vectors = [[1, 0, 0], [0, 1, 0], None, [math.inf, 0, 0], [1, 0, 0]]
    path = write_parquet(tmp_path / "p.parquet", {
        "caption": list("abcde"),
        "img": pa.array(vectors, pa.list_(pa.float16(), 3)),
    })
    corpus = read_corpus(path, Columns(image_emb="img"))
    assert corpus.image_emb.dtype == np.float16 and corpus.image_emb.shape == (5, 3)
    assert corpus.image_emb[1].tolist() == [0, 1, 0]
    assert corpus.reasons[2] == "missing image embedding"
    assert corpus.reasons[3] == "image embedding holds NaN or infinity"
    assert corpus.image_group[0] == corpus.image_group[4] != corpus.image_group[1]


def test_row_hashes_group_equal_rows_only():
    from ncclean.data.corpus import row_hashes

    rng = np.random.default_rng(0)
    for dtype, dim in ((np.float16, 512), (np.float32, 3), (np.float16, 3)):
        rows = rng.standard_normal((50, dim)).astype(dtype)
        rows[7] = rows[3]
        rows[8] = rows[3]
        rows[8, -1] = np.nextafter(rows[8, -1], dtype(np.inf))  # one ulp apart: a different row
        hashes = row_hashes(rows).to_pylist()
        assert hashes[7] == hashes[3] and hashes[8] != hashes[3]
        assert len(set(hashes)) == 49


def test_every_row_of_an_image_id_is_checked_on_its_own_image(tmp_path, huge_png_bytes):
    red, blue = png_bytes((200, 0, 0)), png_bytes((0, 0, 200))
    path = write_parquet(tmp_path / "p.parquet", {
        "image_id": [1, 1, 1, 2, 2, 2],
        "image": [red, red[:60], huge_png_bytes, blue, blue, png_bytes((0, 200, 0))],
        "caption": list("abcdef"),
    })
    corpus = read_corpus(path, image_size=4)
    # Rows whose bytes differ from their image_id's first row are images of their own: the bad
    # ones are invalid alone, the good one is decoded and scored against its own pixels.
    assert corpus.image_group.tolist() == [0, 1, 2, 3, 3, 4]
    assert corpus.image_id_splits == 3
    assert [r is None for r in corpus.reasons] == [True, False, False, True, True, True]
    assert corpus.reasons[1].startswith("undecodable image")
    assert corpus.reasons[2].startswith("image too large")
    assert tuple(corpus.images[4][2, 2]) == (0, 200, 0)


def test_a_reason_never_splits_into_two_kinds(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {
        "image": ["https://example.com/a.png", "b.png"], "caption": ["", "b"]})
    corpus = read_corpus(path, image_size=4)
    corpus.mark(1, "made up; with a semicolon")
    assert corpus.invalid_counts() == {"empty caption": 1, "image is a URL": 1,
                                       "missing image": 1, "made up, with a semicolon": 1}
