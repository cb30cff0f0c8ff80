"""Nothing lost at scale (issue 60), as properties over random corpora: shard names with ``__``,
dots, spaces and non-ASCII letters, nested in folders; ids repeated across Parquet shards and keys
repeated across and within tars; empty shards, truncated tars, 0-byte shards, mixed vector
widths. Every ``score`` run ends either with every input row out exactly once (a repeated id
marked ``invalid`` in all but one of its rows) or with exit 2 and one line naming the offending
file; the readers return a tar whole or refuse it."""

from __future__ import annotations

import io
import tarfile
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from ncclean.cli import main
from ncclean.data.webdataset import read_tar
from ncclean.errors import NcCleanError

CLIP = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]
DIM = 8

# Shard names: a few that collide once folders are flattened (a__b / a/b), dots, spaces,
# non-ASCII letters, and random ones. Names starting with "." or "_" are hidden by design.
SEGMENTS = ["a", "b", "a__b", "a.b", "a b", "é", "漢字", "x__", "part-0"]
segment = st.one_of(
    st.sampled_from(SEGMENTS),
    st.tuples(st.sampled_from("abé漢-"), st.text(alphabet="ab_. é漢-", max_size=5))
    .map(lambda parts: (parts[0] + parts[1]).rstrip()))
relative = st.lists(segment, min_size=1, max_size=3).map(lambda parts: "/".join(parts))


@dataclass
class ShardSpec:
    """One input shard: its path under the corpus folder (no suffix), its rows' ids, and how it
    is damaged (``""``, ``"truncated"`` for a tar cut short, ``"zero-bytes"``) or of another
    vector width."""

    name: str
    ids: list[str]
    damage: str = ""
    width: int = DIM


@st.composite
def corpora(draw, kind: str) -> list[ShardSpec]:
    names = draw(st.lists(relative, min_size=1, max_size=4, unique_by=str.casefold))
    nested = [n for n in names if "/" in n]
    if nested and draw(st.booleans()):  # a/b beside a__b
        flat = nested[0].replace("/", "__")
        names += [flat] if flat.casefold() not in map(str.casefold, names) else []
    fresh = iter(range(10_000))
    used: list[str] = []
    shards = []
    for k, name in enumerate(names):
        n = 8 if k == 0 else draw(st.integers(0, 5))  # the first shard: enough pairs to score
        ids = []
        for _ in range(n):
            pool = used + ids
            repeat = pool and k and draw(st.booleans()) and draw(st.booleans())
            ids.append(draw(st.sampled_from(pool)) if repeat else f"p{next(fresh)}")
        if kind == "webdataset" and len(ids) > 1 and draw(st.integers(0, 5)) == 0:
            ids.insert(1, ids[0])  # a key twice in a row within one tar
        used += ids
        damage = draw(st.sampled_from([""] * 8 + ["zero-bytes"] +
                                      (["truncated"] if kind == "webdataset" else [])))
        width = DIM - 2 if draw(st.integers(0, 15)) == 15 else DIM
        shards.append(ShardSpec(name, ids, damage, width))
    return shards


def _vectors(key: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    image = rng.normal(size=width).astype(np.float32)
    return image, (image + 0.3 * rng.normal(size=width)).astype(np.float32)


def _npy(vector: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, vector)
    return buffer.getvalue()


def write_corpus(folder: Path, kind: str, shards: list[ShardSpec]) -> dict[str, list[tuple]]:
    """The shards as files; for each file, its rows as ``(id, caption)`` in order."""
    rows: dict[str, list[tuple]] = {}
    for s, shard in enumerate(shards):
        path = folder / f"{shard.name}.{'tar' if kind == 'webdataset' else 'parquet'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        captions = [f"caption {s} {r}" for r in range(len(shard.ids))]
        vectors = [_vectors(c, shard.width) for c in captions]
        if kind == "parquet":
            pq.write_table(pa.table({
                "id": pa.array(shard.ids, pa.string()), "caption": pa.array(captions, pa.string()),
                "img": pa.array([v[0] for v in vectors], pa.list_(pa.float32())),
                "txt": pa.array([v[1] for v in vectors], pa.list_(pa.float32()))}), path)
        else:
            with tarfile.open(path, "w") as tar:
                for key, caption, (image, text) in zip(shard.ids, captions, vectors, strict=True):
                    for ext, data in (("txt", caption.encode()), ("img.npy", _npy(image)),
                                      ("txt.npy", _npy(text))):
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
            if shard.damage == "truncated":  # at the last member's header, or inside it
                with tarfile.open(path) as tar:
                    last = tar.getmembers()[-1] if shard.ids else None
                cut = 0 if last is None else last.offset_data + 1 if len(shard.ids) % 2 \
                    else last.offset
                path.write_bytes(path.read_bytes()[:cut])
        if shard.damage == "zero-bytes":
            path.write_bytes(b"")
        rows[str(path)] = list(zip(shard.ids, captions, strict=True))
    return rows


def _features(shards: list[ShardSpec]) -> dict[str, bool]:
    """What a corpus holds that could lose rows (shown by --hypothesis-show-statistics)."""
    ids = [i for shard in shards for i in shard.ids]
    flat = [shard.name.replace("/", "__") for shard in shards]
    return {"a repeated id": len(set(ids)) < len(ids),
            "names that flatten alike": len(set(flat)) < len(flat),
            "nested": any("/" in shard.name for shard in shards),
            "damaged": any(shard.damage for shard in shards),
            "an empty shard": any(not shard.ids for shard in shards),
            "mixed widths": len({shard.width for shard in shards}) > 1}


def _output_rows(out: Path) -> list[tuple[str, str, str]]:
    files = sorted(p for p in out.rglob("*.parquet")
                   if not any(part.startswith((".", "_")) for part in p.relative_to(out).parts))
    rows = []
    for file in files:
        table = pq.read_table(file, columns=["id", "caption", "partition"])
        rows += zip(*(table.column(c).to_pylist() for c in ("id", "caption", "partition")),
                    strict=True)
    return rows


SCORE = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


EIGHT = [f"p{k}" for k in range(8)]


@SCORE
@given(corpora("parquet"))
@example([ShardSpec("a__b", EIGHT), ShardSpec("a/b", ["p8", "p9"])])  # one flattened name
@example([ShardSpec("a", EIGHT), ShardSpec("b/c", ["p8", "p0", "p1"])])  # ids repeated
@example([ShardSpec("a", EIGHT), ShardSpec("b", ["p8", "p9"], width=DIM - 2)])
@example([ShardSpec("a", EIGHT), ShardSpec("a  b", ["p8"], damage="zero-bytes")])
def test_score_puts_out_every_parquet_row_once_or_names_the_offending_file(capsys, shards):
    score_checks(capsys, "parquet", shards)


@SCORE
@given(corpora("webdataset"))
@example([ShardSpec("a__b", EIGHT), ShardSpec("a/b", ["p8", "p0"])])
@example([ShardSpec("a", EIGHT[:1] + EIGHT), ShardSpec("b", ["p0", "p8", "p8"])])
@example([ShardSpec("a", EIGHT), ShardSpec("a/a", ["p8"], width=DIM - 2)])
@example([ShardSpec("a", EIGHT), ShardSpec("b", ["p8", "p9"], damage="truncated")])
def test_score_puts_out_every_sample_once_or_names_the_offending_tar(capsys, shards):
    score_checks(capsys, "webdataset", shards)


def score_checks(capsys, kind: str, shards: list[ShardSpec]) -> None:
    """Score the corpus of ``shards`` and check the contract (the module docstring)."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "in"
        rows = write_corpus(folder, kind, shards)
        out = Path(scratch) / "out"
        code = main(["score", str(folder), "-o", f"{out}/", *CLIP])
        err = capsys.readouterr().err
        for feature, present in _features(shards).items():
            event(f"{feature}: {present}")
        event(f"{kind}: exit {code}")
        lines = err.strip().splitlines()
        damaged = [p for p, s in zip(rows, shards, strict=True) if s.damage]
        empty = [p for p, r in rows.items() if not r]
        widths = {s.width for p, s in zip(rows, shards, strict=True)
                  if p not in damaged and p not in empty}
        if damaged or len(widths) > 1:
            blamed = damaged + empty if len(widths) == 1 else list(rows)
            assert code == 2, (code, err)
            assert len(lines) == 1 and "Traceback" not in err, err
            assert any(p in lines[0] for p in blamed), (blamed, err)
            return
        if code == 2 and empty:  # an empty shard may be refused, by name
            assert len(lines) == 1 and any(p in lines[0] for p in empty), err
            return
        assert code == 0, (code, err)
        got = _output_rows(out)
        want = [row for file_rows in rows.values() for row in file_rows]
        assert Counter((i, c) for i, c, _ in got) == Counter(want)  # every row exactly once
        partitions: dict[str, list[str]] = {}
        for pair_id, _, partition in got:
            partitions.setdefault(pair_id, []).append(partition)
        for pair_id, seen in partitions.items():  # a repeated id: all but one row invalid
            assert seen.count("invalid") >= len(seen) - 1, (pair_id, seen)


@st.composite
def tars(draw) -> tuple[list[str], bytes]:
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "d/a", "d/b"]), min_size=0, max_size=8))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for k, key in enumerate(keys):
            for ext, data in (("txt", f"caption {k}".encode()), ("json", b'{"w": 1}')):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return keys, buffer.getvalue()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(tars(), st.floats(0, 1))
def test_read_tar_gives_every_sample_or_refuses(corpus, where):
    keys, data = corpus
    cut = int(where * len(data))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "t.tar"
        path.write_bytes(data[:cut])
        try:
            table = read_tar(path)
        except NcCleanError as error:
            assert str(path) in str(error) and "\n" not in str(error)
            return
    assert table.column("id").to_pylist() == keys  # whole, a sample per run of a key
    assert table.column("caption").to_pylist() == [f"caption {k}" for k in range(len(keys))]
