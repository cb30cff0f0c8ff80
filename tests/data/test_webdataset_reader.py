"""The shard readers refuse what they cannot read whole (issue 60): webdataset samples that share
a key are each a row, a truncated or damaged tar or Parquet shard is one line naming the file
(exit 2), never a table of what could be read, and ``inspect`` reads every input ``score``
reads."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.cli import main
from ncclean.data.shards import InputShard, list_shards, read_shard
from ncclean.data.webdataset import read_tar
from ncclean.errors import CorruptInputError, EmptyInputError, NotParquetError, SchemaError
from tests.helpers import png_bytes
from tests.pipeline.test_shards import saved_hf_dataset

VECTORS = ["--method", "clip", "--image-emb-col", "image_emb", "--text-emb-col", "text_emb",
           "--no-cache"]


def npy(vector: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, vector.astype(np.float32))
    return buffer.getvalue()


def write_tar(path, members: list[tuple[str, bytes]]):
    """A tar of ``members`` (name, bytes) in that order, as Python's tarfile writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def sample(key: str, seed: int, json_text: bytes | None = None) -> list[tuple[str, bytes]]:
    """One sample: an image, a caption and two 8-d vectors (the caption's near the image's)."""
    rng = np.random.default_rng(seed)
    image = rng.normal(size=8)
    members = [(f"{key}.png", png_bytes()), (f"{key}.txt", f"caption {seed}".encode()),
               (f"{key}.image_emb.npy", npy(image)),
               (f"{key}.text_emb.npy", npy(image + 0.3 * rng.normal(size=8)))]
    if json_text is not None:
        members.append((f"{key}.json", json_text))
    return members


def samples(keys: list[str], first_seed: int = 0) -> list[tuple[str, bytes]]:
    return [m for k, key in enumerate(keys) for m in sample(key, first_seed + k)]


def run(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncclean: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def scored_ids(folder) -> list[str]:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.glob("*.parquet"))]) \
        .column("id").to_pylist()


# ---------------------------------------------------------------- samples sharing a key (5)


def test_a_key_repeated_in_one_tar_gives_a_row_per_sample(tmp_path):
    keys = [f"{k:03d}" for k in range(6)]
    tar = write_tar(tmp_path / "wds" / "00000.tar",
                    samples(keys) + samples(["001"], 10) + samples(["004", "004"], 20))
    table = read_tar(tar)
    assert table.column("id").to_pylist() == keys + ["001", "004", "004"]
    assert table.column("caption").to_pylist()[-3:] == ["caption 10", "caption 20", "caption 21"]
    refs = table.column("image_ref").to_pylist()
    assert len(set(refs)) == 6  # the repeated samples point at their own (later) members
    assert table.column("image_emb").null_count == 0


def test_keys_in_folders_of_one_tar_are_their_paths(tmp_path):
    members = samples(["a/0", "a/1"]) + samples(["b/0", "b/1"], 5) + samples(["./c"], 9)
    table = read_tar(write_tar(tmp_path / "x.tar", members))
    assert table.column("id").to_pylist() == ["a/0", "a/1", "b/0", "b/1", "c"]


def test_every_sample_of_a_tar_with_a_repeated_key_is_scored(capsys, tmp_path):
    keys = [f"{k:03d}" for k in range(30)]
    write_tar(tmp_path / "wds" / "00000.tar", samples(keys) + samples(["003", "007"], 50))
    code, err = run(capsys, "score", tmp_path / "wds", "-o", f"{tmp_path / 'out'}/", *VECTORS)
    assert code == 0, err
    assert scored_ids(tmp_path / "out") == keys + ["003", "007"]


# ------------------------------------------------------------------------- truncated tars (6)


def _cuts(data: bytes, path) -> dict[str, int]:
    """Where to cut the tar at ``path``: inside a member's bytes, at a member boundary (no
    end-of-archive marker), inside a header, and just before the marker."""
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    middle = next(m for m in members[len(members) // 2:] if m.size > 100)
    end = members[-1].offset_data + -(-members[-1].size // 512) * 512
    return {"inside a member": middle.offset_data + 50, "at a member boundary": middle.offset,
            "inside a header": middle.offset + 300, "before the marker": end}


@pytest.mark.parametrize("cut", ["inside a member", "at a member boundary", "inside a header",
                                 "before the marker"])
def test_a_truncated_tar_is_refused_naming_it(capsys, tmp_path, cut):
    tar = write_tar(tmp_path / "wds" / "00001.tar", samples([f"{k:03d}" for k in range(20)]))
    write_tar(tmp_path / "wds" / "00000.tar", samples(["x0", "x1"], 40))
    data = tar.read_bytes()
    tar.write_bytes(data[:_cuts(data, tar)[cut]])
    with pytest.raises(CorruptInputError, match="truncated"):
        read_tar(tar)
    code, err = run(capsys, "score", tmp_path / "wds", "-o", f"{tmp_path / 'out'}/", *VECTORS)
    line = one_line(err)
    assert code == 2 and str(tar) in line and "truncated" in line and "re-create" in line
    assert not list((tmp_path / "out").glob("*.parquet")) if (tmp_path / "out").exists() else True


def test_a_tar_with_one_zero_block_at_its_end_is_whole(tmp_path):
    tar = write_tar(tmp_path / "t.tar", samples(["a", "b"]))
    data = tar.read_bytes()
    tar.write_bytes(data[:_cuts(data, tar)["before the marker"] + 512])
    assert read_tar(tar).column("id").to_pylist() == ["a", "b"]


def test_two_tars_joined_with_cat_are_refused(tmp_path):
    first = write_tar(tmp_path / "a.tar", samples(["a"])).read_bytes()
    second = write_tar(tmp_path / "b.tar", samples(["b"])).read_bytes()
    (tmp_path / "ab.tar").write_bytes(first + second)
    with pytest.raises(CorruptInputError, match="second tar archive"):
        read_tar(tmp_path / "ab.tar")


def test_a_gzip_compressed_tar_is_read(tmp_path):
    write_tar(tmp_path / "plain.tar", samples(["a", "b"]))
    with tarfile.open(tmp_path / "z.tar", "w:gz") as out, \
            tarfile.open(tmp_path / "plain.tar") as src:
        for member in src:
            out.addfile(member, src.extractfile(member))
    assert read_tar(tmp_path / "z.tar").column("id").to_pylist() == ["a", "b"]


# ------------------------------------------------------------------- unreadable members (7)


@pytest.mark.parametrize("member, data, says", [
    ("003.json", b"{'caption': 1}", "not valid JSON"),
    ("003.json", b"[1, 2]", "not an object"),
    ("003.txt", b"caption \xff\xfe", "not UTF-8"),
    ("003.image_emb.npy", b"\x93NUMPY garbage", "not a .npy array"),
])
def test_an_unreadable_member_is_exit_2_naming_the_tar_and_member(capsys, tmp_path, member,
                                                                  data, says):
    keys = [f"{k:03d}" for k in range(6)]
    members = [(name, data if name == member else body) for name, body in samples(keys)]
    if member not in dict(members):
        members.append((member, data))
    tar = write_tar(tmp_path / "wds" / "00000.tar", members)
    with pytest.raises(CorruptInputError, match=says):
        read_tar(tar)
    code, err = run(capsys, "score", tmp_path / "wds", "-o", f"{tmp_path / 'out'}/", *VECTORS)
    line = one_line(err)
    assert code == 2 and str(tar) in line and member in line and says in line


# --------------------------------------------------------------------- empty or not a tar (8)


def test_a_zero_byte_or_foreign_tar_is_one_line_naming_it(capsys, tmp_path):
    (tmp_path / "wds").mkdir()
    empty = tmp_path / "wds" / "00000.tar"
    empty.write_bytes(b"")
    with pytest.raises(EmptyInputError, match="0 bytes"):
        read_tar(empty)
    code, err = run(capsys, "score", tmp_path / "wds", "-o", f"{tmp_path / 'out'}/", *VECTORS)
    assert code == 2 and str(empty) in one_line(err)
    empty.write_bytes(b"id,caption\n1,a cat\n")
    with pytest.raises(NotParquetError, match="not a tar archive"):
        read_tar(empty)
    code, err = run(capsys, "score", tmp_path / "wds", "-o", f"{tmp_path / 'out'}/", *VECTORS)
    assert code == 2 and str(empty) in one_line(err)


def test_a_tar_with_no_members_is_read_as_no_rows(tmp_path):
    table = read_tar(write_tar(tmp_path / "none.tar", []))
    assert table.num_rows == 0 and table.column_names[:2] == ["id", "caption"]


# ------------------------------------------------------------ damaged Parquet shards (26)


def _vector_shard(path, ids: list[str], seed: int = 0):
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(len(ids), 8)).astype(np.float32)
    pq.write_table(pa.table({
        "id": ids, "caption": [f"caption {i}" for i in ids],
        "image_emb": pa.array(list(image), pa.list_(pa.float32(), 8)),
        "text_emb": pa.array(list(image + 0.3), pa.list_(pa.float32(), 8))}), path)


@pytest.mark.parametrize("damage", [b"", b"PAR1 not really parquet"])
def test_read_shard_names_a_damaged_parquet_shard(tmp_path, damage):
    path = tmp_path / "b.parquet"
    path.write_bytes(damage)
    shard = InputShard(path, "b", "parquet")
    for columns in (None, ["id"]):
        with pytest.raises(NotParquetError, match="b.parquet: not a readable Parquet file"):
            read_shard(shard, columns)


def test_read_shard_names_a_shard_without_a_column(tmp_path):
    pq.write_table(pa.table({"caption": ["a"]}), tmp_path / "a.parquet")
    with pytest.raises(SchemaError, match="a.parquet: no column 'id'"):
        read_shard(InputShard(tmp_path / "a.parquet", "a", "parquet"), ["id"])
    (tmp_path / "b.arrow").write_bytes(b"nothing")
    with pytest.raises(NotParquetError, match="b.arrow: not a readable Arrow file"):
        read_shard(InputShard(tmp_path / "b.arrow", "b", "arrow"))


@pytest.mark.parametrize("damaged", ["a", "b"])
@pytest.mark.parametrize("damage", [b"", b"PAR1 not really parquet"])
def test_a_sharded_run_over_a_damaged_parquet_shard_is_exit_2(capsys, tmp_path, damage, damaged):
    folder = tmp_path / "shards"
    folder.mkdir()
    for name in "ab":
        _vector_shard(folder / f"{name}.parquet", [f"{name}{k}" for k in range(30)])
    (folder / f"{damaged}.parquet").write_bytes(damage)
    code, err = run(capsys, "score", folder, "-o", f"{tmp_path / 'out'}/", *VECTORS)
    assert code == 2 and str(folder / f"{damaged}.parquet") in one_line(err)


# ------------------------------------------------------------ inspect reads what score reads (10)


def test_inspect_reads_a_webdataset_folder(capsys, tmp_path):
    keys = [f"{k:03d}" for k in range(8)]
    write_tar(tmp_path / "wds" / "00000.tar", samples(keys[:5]))
    write_tar(tmp_path / "wds" / "00001.tar", samples(keys[5:], 5))
    code = main(["inspect", str(tmp_path / "wds"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_pairs"] == 8 and summary["n_invalid"] == 0
    assert summary["n_shards"] == 2 and summary["shard_kind"] == "webdataset"
    assert summary["columns"]["caption"] == "caption" and summary["columns"]["image"] == "image"
    assert summary["vector_columns"] == ["image_emb", "text_emb"]
    code = main(["inspect", str(tmp_path / "wds" / "00001.tar")])
    out, err = capsys.readouterr()
    assert code == 0 and "3 pairs" in out, err


def test_inspect_reads_a_saved_hugging_face_dataset(capsys, tmp_path):
    rng = np.random.default_rng(0)
    table = pa.table({"id": [f"p{k}" for k in range(10)],
                      "caption": [f"caption {k}" for k in range(10)],
                      **{name: pa.array(list(rng.normal(size=(10, 8)).astype(np.float32)),
                                        pa.list_(pa.float32(), 8)) for name in ("img", "txt")}})
    saved_hf_dataset(tmp_path / "hf", table)
    assert {s.kind for s in list_shards(tmp_path / "hf")} == {"arrow"}
    code = main(["inspect", str(tmp_path / "hf"), "--json", "--image-emb-col", "img",
                 "--text-emb-col", "txt"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_pairs"] == 10 and summary["n_shards"] == 2
    assert summary["columns"]["image_emb"] == "img" and summary["vector_columns"] == ["img", "txt"]


def test_inspect_marks_a_repeated_key_and_names_a_truncated_tar(capsys, tmp_path):
    tar = write_tar(tmp_path / "wds" / "00000.tar", samples(["a", "b", "a"]))
    code = main(["inspect", str(tmp_path / "wds"), "--json", "--no-decode"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_pairs"] == 3 and summary["n_invalid"] == 1  # the second "a"
    assert summary["invalid_examples"][0][:2] == [2, "a"]
    tar.write_bytes(tar.read_bytes()[:1024])
    code, err = run(capsys, "inspect", tmp_path / "wds")
    assert code == 2 and str(tar) in one_line(err) and "truncated" in err
