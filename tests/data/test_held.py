"""A part read from its decoded copy gives the rows the file gives, batch for batch; without a
copy it is read from the file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from ncclean.data.held import from_copy
from ncclean.data.parquet import open_pairs, windows


def _table(n: int) -> pa.Table:
    return pa.table({"id": [f"p{k}" for k in range(n)], "caption": [f"c{k % 7}" for k in range(n)],
                     "image": [bytes([k % 256]) * 10 for k in range(n)],
                     "score": [float(k) for k in range(n)]})


def _rows(batches) -> tuple[list[int], pa.Table]:
    batches = list(batches)
    return [offset for _, offset, _ in batches], pa.Table.from_batches([b for *_, b in batches])


def test_a_part_read_from_its_decoded_copy_gives_the_file_s_rows(tmp_path):
    from ncclean.data.held import CopiedSource, DecodedCopies

    pq.write_table(_table(1000), tmp_path / "in.parquet", row_group_size=100)
    source = open_pairs(tmp_path / "in.parquet")
    copies = DecodedCopies(tmp_path, ["id", "caption"])
    for _, _, batch in source.iter_batches(None, 96):  # batches across the row groups
        copies.add(source.path, pa.Table.from_batches([batch]))
    copies.close()
    start = 0
    for part in windows(source, 300):
        kept = from_copy(part, ["caption", "id"], copies.paths[source.path], start)
        assert isinstance(kept, CopiedSource)
        for columns in (None, ["id"], ["image", "id"], ["score", "caption", "image"]):
            offsets, got = _rows(kept.iter_batches(columns, 128))
            want_offsets, want = _rows(part.iter_batches(columns, 128))
            assert got.equals(want) and offsets[0] == want_offsets[0] == 0
        start += part.n_rows


def test_without_a_copy_a_part_is_read_from_the_file(tmp_path):
    pq.write_table(_table(100), tmp_path / "in.parquet")
    part = open_pairs(tmp_path / "in.parquet")
    assert from_copy(part, ["id"]) is part
    assert from_copy(part, ["id"], tmp_path / "missing.arrow") is part


def test_decoded_copies_need_room_on_the_disk(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from ncclean.data.held import copies_for, decoded_bytes

    pq.write_table(_table(1000), tmp_path / "in.parquet")
    need = decoded_bytes([tmp_path / "in.parquet"], ["id", "caption"])
    assert need > 0
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, 2 * need))
    assert copies_for([tmp_path / "in.parquet"], ["id", "caption"], tmp_path) is not None
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, 2 * need - 2))
    assert copies_for([tmp_path / "in.parquet"], ["id", "caption"], tmp_path) is None
