"""The command line's contract (issues 40 and 41): one set of exit codes for every command, the
help texts, the cut options that exclude each other, ``retrain``'s test file, and the four
commands exactly as users type them."""

from __future__ import annotations

import errno
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean import api
from ncclean.cli import EXIT_CODES, main
from tests.helpers import write_parquet

COMMANDS = ["score", "methods", "synth", "inject-noise", "inspect", "split", "check", "retrain",
            "embed"]


def run(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncclean: error: "), err
    assert "Traceback" not in err
    return lines[0]


def embedding_corpus(path, n: int = 40, dim: int = 8, seed: int = 0, names=("caption", "img",
                                                                            "txt")) -> str:
    """``n`` pairs with image and caption vectors, a fifth of them mismatched."""
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(n, dim)).astype(np.float32)
    text = image + 0.2 * rng.normal(size=(n, dim)).astype(np.float32)
    text[: n // 5] = rng.normal(size=(n // 5, dim))
    caption, img, txt = names
    write_parquet(path, {"id": [f"p{seed}-{i}" for i in range(n)],
                         caption: [f"caption {seed} {i}" for i in range(n)],
                         img: pa.array(list(image), pa.list_(pa.float32(), dim)),
                         txt: pa.array(list(text), pa.list_(pa.float32(), dim))})
    return path


CLIP = ["--method", "clip", "--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]


# ------------------------------------------------------------------------------------ exit codes


def test_a_full_disk_or_no_permission_is_bad_input(capsys, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(api, "score", full)
    code, _, err = run(capsys, "score", "in.parquet", "-o", "out.parquet")
    assert code == 2 and "No space left on device" in one_line(err)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "out.parquet")

    monkeypatch.setattr(api, "score", denied)
    code, _, err = run(capsys, "score", "in.parquet", "-o", "out.parquet")
    assert code == 2 and "Permission denied" in one_line(err)


def test_a_bug_is_exit_3_with_one_line_and_the_traceback_only_under_debug(capsys, tmp_path,
                                                                           monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(api, "check", broken)
    code, _, err = run(capsys, "check", tmp_path / "x.parquet")
    assert code == 3
    assert "internal error: KeyError" in one_line(err) and "please report it" in err
    code, _, err = run(capsys, "check", tmp_path / "x.parquet", "--debug")  # after the command
    assert code == 3 and "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("ncclean: error: internal error: KeyError")


def test_debug_is_accepted_after_the_command(capsys, tmp_path):
    code, _, err = run(capsys, "check", tmp_path / "missing.parquet", "--debug")
    assert code == 2 and "Traceback" in err  # the traceback, then the same line and code
    assert "no such file" in err.strip().splitlines()[-1]
    code, _, err = run(capsys, "check", tmp_path / "missing.parquet")
    assert code == 2 and "no such file" in err


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_choices_shows_flags_as_flags_and_cuts_no_name(capsys, command, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "…" not in out, [line for line in out.splitlines() if "…" in line]
    assert "<bool>" not in out
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    assert " ".join(EXIT_CODES.split()) in text
    if command == "score":
        assert re.search(r"--method\s+<auto\|clip\|crcl\|disncl\|gmm\|pc2\|sdd", out)


def test_the_command_line_starts_on_a_typer_without_the_help_type_hook(tmp_path):
    """The help's type hook is typer's own method (0.29); a typer without it still runs every
    command, with typer's own types in the help."""
    import subprocess
    import sys

    script = ("import typer.core\n"
              "for c in typer.core.TyperOption.__mro__:\n"
              "    if 'display_type_rich' in vars(c): delattr(c, 'display_type_rich')\n"
              "from ncclean.cli import main\n"
              "raise SystemExit(main(['synth', '-o', r'%s', '--n-images', '4',\n"
              "                       '--captions-per-image', '3']))\n"
              % (tmp_path / "s.parquet"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "s.parquet").num_rows == 12


def test_a_broken_dependency_is_one_line_and_exit_3_not_a_traceback(tmp_path):
    import subprocess
    import sys

    script = ("import sys\n"
              "sys.modules['typer'] = None  # an import of typer fails, as a broken install's\n"
              "from ncclean.cli import main\n"
              "raise SystemExit(main(['inspect', 'x.parquet']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncclean: error: cannot start: "), done.stderr
    assert "reinstall ncclean" in lines[0]


# --------------------------------------------------------------------------------- nonsense cuts


@pytest.mark.parametrize("args, said", [
    (["--noise-rate", "0.2", "--clean-above", "0.9"], "--noise-rate cuts by a share and wins "
     "over --clean-above, which would be ignored"),
    (["--noise-rate", "auto", "--noisy-below", "0.3"], "wins over --noisy-below"),
])
def test_a_cut_option_another_overrides_is_an_error(capsys, tmp_path, args, said):
    path = embedding_corpus(tmp_path / "in.parquet")
    code, _, err = run(capsys, "score", path, "-o", tmp_path / "new" / "out.parquet", *CLIP,
                       *args)
    assert code == 2 and said in one_line(err)
    assert not (tmp_path / "new").exists()  # the folder it would have created is not left


def test_the_library_refuses_the_same_and_records_no_ignored_threshold():
    from ncclean.errors import BadOptionError
    from ncclean.options import DEFAULT_CUT, Cut

    with pytest.raises(BadOptionError, match="would be ignored"):
        Cut(noise_rate=0.2, clean_above=0.9)
    cut = Cut(noise_rate=0.2)
    assert cut.record(cut, by_method=False)["clean_above"] is None
    assert DEFAULT_CUT.record(DEFAULT_CUT, by_method=False)["clean_above"] == 0.8


def test_resume_without_a_checkpoint_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = embedding_corpus(tmp_path / "in.parquet")
    (tmp_path / "ck").mkdir()
    code, out, err = run(capsys, "score", path, "-o", "out.parquet", *CLIP, "--checkpoint-dir",
                         "ck", "--resume")
    assert code == 0
    assert "ncclean: warning: --resume: no checkpoint in ck; starting from scratch" in err


# ------------------------------------------------------------------------------ retrain --test


def test_retrain_names_the_file_lacking_a_column_and_takes_test_columns(capsys, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    embedding_corpus(tmp_path / "in.parquet")
    embedding_corpus(tmp_path / "test.parquet", seed=1, names=("text", "pic", "vec"))
    assert run(capsys, "score", "in.parquet", *CLIP)[0] == 0
    code, _, err = run(capsys, "retrain", "--test", "test.parquet", "--steps", 4)
    line = one_line(err)
    assert code == 2 and "test file test.parquet" in line and "caption" in line
    code, out, err = run(capsys, "retrain", "--test", "test.parquet", "--steps", 4,
                         "--test-caption-col", "text", "--test-image-emb-col", "pic",
                         "--test-text-emb-col", "vec", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_test"] == 40
    assert [w[:28] for w in summary["warnings"]] == ["the test set is tiny: 40 pai"]
    assert "reading in.scored.parquet" in err  # the input it took, on stderr beside --json


def test_retrain_warns_when_the_test_file_overlaps_the_training_pairs(capsys, tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    embedding_corpus(tmp_path / "in.parquet")
    assert run(capsys, "score", "in.parquet", *CLIP)[0] == 0
    code, out, _ = run(capsys, "retrain", "in.scored.parquet", "--test", "in.parquet",
                       "--steps", 4)
    assert code == 0
    text = " ".join(out.split())
    assert "warning: the test file in.parquet overlaps the training pairs: 40 test pairs have " \
           "ids of in.scored.parquet and 40 its image and caption" in text


def test_retrain_without_test_holds_out_the_same_pairs_every_time():
    from ncclean.pipeline.retrain import held_out

    ids = [f"id{i}" for i in range(2000)]
    groups = np.arange(2000)
    groups[:100] = 0  # a caption shared by 100 pairs: never held out
    held = held_out(ids, groups)
    assert 0.07 < held.mean() < 0.13 and not held[:100].any()
    assert (held_out(ids, groups) == held).all()
    assert (held_out(ids[::-1], groups[::-1]) == held[::-1]).all()  # by id, not position


# ------------------------------------------------------------------- the commands as users type


def test_a_users_day_score_split_retrain_check(capsys, tmp_path, monkeypatch):
    """In an empty folder holding only pairs.parquet, the four commands exactly as typed."""
    monkeypatch.chdir(tmp_path)
    api.synth(tmp_path / "pairs.parquet", n_images=20, captions_per_image=3, seed=0)
    (tmp_path / "pairs.parquet.json").unlink(missing_ok=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.parquet"]

    code, out, err = run(capsys, "score", "pairs.parquet", "--method", "pc2",
                         "-p", "warmup_epochs=1", "-p", "epochs=1", "--image-size", 16,
                         "--embed-dim", 16)
    assert code == 0, err
    assert "read pairs.parquet, wrote pairs.scored.parquet" in out
    code, out, err = run(capsys, "split", "--report")
    assert code == 0, err
    assert "split: reading pairs.scored.parquet" in out
    assert "into pairs.scored.split/" in out and "summary: pairs.scored.split/summary.json" in out
    part = pq.read_schema(tmp_path / "pairs.scored.split" / "noisy.parquet")
    assert b"ncclean" not in (part.metadata or {})  # a part is not the scoring run's output
    code, out, err = run(capsys, "retrain", "--steps", 8)
    assert code == 0, err
    assert "retrain: reading pairs.scored.parquet" in out
    assert "no --test: recall is measured on" in " ".join(out.split())
    code, out, err = run(capsys, "check")
    assert code == 0, err
    assert "check: reading pairs.scored.parquet" in out and "PASS: noisy" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".ncclean", "pairs.parquet", "pairs.scored.parquet", "pairs.scored.parquet.json",
        "pairs.scored.split"]
    assert len(pq.read_table(tmp_path / "pairs.scored.parquet")) == 60


def test_score_never_writes_its_default_over_a_file_it_did_not_write(capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    embedding_corpus(tmp_path / "in.parquet")
    write_parquet(tmp_path / "in.scored.parquet", {"mine": [1, 2]})
    code, _, err = run(capsys, "score", "in.parquet", *CLIP)
    assert code == 2
    assert "in.scored.parquet exists and was not written by 'ncclean score'" in one_line(err)
    assert pq.read_table(tmp_path / "in.scored.parquet").column_names == ["mine"]
    (tmp_path / "in.scored.parquet").unlink()
    assert run(capsys, "score", "in.parquet", *CLIP)[0] == 0
    assert run(capsys, "score", "in.parquet", *CLIP)[0] == 0  # its own file: replaced


def test_without_an_input_and_nothing_scored_here_is_bad_input(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in ("split", "retrain", "check"):
        code, _, err = run(capsys, command)
        assert code == 2
        assert "no input given, and 'ncclean score' has written no file from this folder" \
            in one_line(err)
