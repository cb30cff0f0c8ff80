"""What an interrupted run says and leaves (issue 60): a sharded run keeps its complete shards and
says so, and leaves no folder it made empty; ``embed --layout clip-retrieval`` leaves nothing,
and its working files carry the run's id so that the next run removes a killed run's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from ncclean.cli import main
from tests.models import test_openclip
from tests.pipeline.corpora import vector_table, write_shards

offline, tiny_clip, noisy_shapes = (test_openclip.offline, test_openclip.tiny_clip,
                                   test_openclip.noisy_shapes)  # the fixtures, offline
SCRATCH_MARK = ".ncclean-scratch-"  # a run's working folder: ncclean.data.atomic.scratch_folder
VECTORS = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]


def _run(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def _interrupt_at_shard(monkeypatch, k: int) -> None:
    """SIGINT (Ctrl-C) as the ``k``-th shard (from 0) starts being applied."""
    from ncclean.pipeline import engines

    apply, calls = engines.apply_shard, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) > k:
            os.kill(os.getpid(), signal.SIGINT)
        return apply(*args, **kwargs)

    monkeypatch.setattr(engines, "apply_shard", interrupted)


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_an_interrupted_sharded_run_says_which_shards_it_kept(capsys, tmp_path, monkeypatch):
    write_shards(vector_table(400), tmp_path / "in", 4)
    out = tmp_path / "out"
    _interrupt_at_shard(monkeypatch, 2)
    code, err = _run(capsys, "score", tmp_path / "in", "-o", out, *VECTORS)
    assert code == 130
    assert err.strip().splitlines()[-1] == (
        f"ncclean: error: interrupted: ncclean score kept 2 of 4 shards complete in {out}/ "
        "(the same command finishes the rest; partial files removed)")
    assert sorted(os.listdir(out)) == ["part-000.parquet", "part-001.parquet"]  # nothing else
    monkeypatch.undo()
    code, err = _run(capsys, "score", tmp_path / "in", "-o", out, *VECTORS)
    assert code == 0, err


def test_an_interrupt_before_any_shard_leaves_no_folder_it_made(capsys, tmp_path, monkeypatch):
    write_shards(vector_table(200), tmp_path / "in", 2)
    _interrupt_at_shard(monkeypatch, 0)
    code, err = _run(capsys, "score", tmp_path / "in", "-o", tmp_path / "new" / "sub", *VECTORS)
    assert code == 130
    assert err.strip().splitlines()[-1] == (
        "ncclean: error: interrupted: ncclean score wrote nothing; partial files removed")
    assert sorted(os.listdir(tmp_path)) == ["in"]  # new/sub/ and its scratch are gone


def _embed(capsys, tiny_clip, source, out) -> tuple[int, str]:
    return _run(capsys, "embed", source, "-o", out, "--layout", "clip-retrieval",
                "--clip-model", tiny_clip[0], "--clip-checkpoint", tiny_clip[1])


def test_an_interrupted_retrieval_embed_leaves_nothing(capsys, tmp_path, monkeypatch, tiny_clip,
                                                       noisy_shapes):
    import ncclean.embed

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ncclean.embed, "_filled", terminated)  # while the vectors are written
    code, err = _embed(capsys, tiny_clip, noisy_shapes, tmp_path / "new" / "emb")
    assert code == 143
    assert err.strip().splitlines()[-1] == (
        "ncclean: error: interrupted: ncclean embed wrote nothing; partial files removed")
    assert os.listdir(tmp_path) == []  # neither new/ nor a temporary folder


def test_a_retrieval_embed_works_in_a_scratch_folder_of_its_own_and_removes_a_killed_ones(
        capsys, tmp_path, monkeypatch, tiny_clip, noisy_shapes):
    import ncclean.embed

    parent = tmp_path / "kcr"
    killed = parent / f"{SCRATCH_MARK}{_gone_pid()}-x7k2"  # what a kill -9 leaves
    (killed / "emb" / "img_emb").mkdir(parents=True)
    (killed / "emb" / "img_emb" / "img_emb_0.npy").write_bytes(b"half")
    filled, seen = ncclean.embed._filled, []

    def watched(*args, **kwargs):
        seen.append(sorted(os.listdir(parent)))
        return filled(*args, **kwargs)

    monkeypatch.setattr(ncclean.embed, "_filled", watched)
    code, err = _embed(capsys, tiny_clip, noisy_shapes, parent / "emb")
    assert code == 0, err
    working = [name for name in seen[0] if name != "emb"]  # the run's own, named by its pid
    assert len(working) == 1 and working[0].startswith(f"{SCRATCH_MARK}{os.getpid()}-"), seen[0]
    assert sorted(os.listdir(parent)) == ["emb"]  # the killed run's scratch is gone too

