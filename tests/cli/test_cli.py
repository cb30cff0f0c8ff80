"""The command line: exit codes, one-line errors, JSON equal to the library's result."""

import json
import re
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from ncclean import __version__, api
from ncclean.cli import main
from tests.helpers import huge_png, png_bytes, write_parquet


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ncclean: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"ncclean {__version__}"


def test_help_is_fast_and_does_not_import_torch():
    code = ("import sys, time; t = time.perf_counter(); from ncclean.cli import main; "
            "rc = main(['--help']); "
            "print(time.perf_counter() - t, 'torch' in sys.modules, 'pyarrow' in sys.modules)")
    timings = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True)
        seconds, torch_loaded, arrow_loaded = done.stdout.strip().splitlines()[-1].split()
        assert torch_loaded == "False" and arrow_loaded == "False"
        timings.append(float(seconds))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ncclean", "--help"], capture_output=True, check=True)
    timings.append(time.perf_counter() - start)  # the whole process, interpreter start included
    assert min(timings) < 0.5


def test_synth_inject_inspect_round_trip(capsys, tmp_path):
    shapes, noisy = tmp_path / "shapes.parquet", tmp_path / "noisy.parquet"
    code, out, _ = run(capsys, "synth", "-o", shapes, "--n-images", 20, "--lang", "mixed")
    assert code == 0 and "100 pairs" in out
    code, out, _ = run(capsys, "inject-noise", shapes, "-o", noisy, "--ratio", 0.3, "--seed", 2)
    assert code == 0
    assert "requested  30.0% of captions = 30 captions" in out and "realised" in out
    assert "image side image, image_id (moved together)" in out
    code, out, _ = run(capsys, "inspect", noisy)
    assert code == 0 and "100 pairs, 20 images" in out and "no invalid rows" in out
    assert re.search(r"captions by writing system: (latin|cjk) \d+ \(\d+", out) and "cjk" in out
    japanese = write_parquet(tmp_path / "ja.parquet", {  # kana alone, and with kanji
        "caption": ["ねこ", "いぬとねこ", "猫です", "a cat"], "image": [png_bytes()] * 4})
    code, out, _ = run(capsys, "inspect", japanese, "--json")
    found = json.loads(out)
    assert found["cjk_captions"] == 3 and found["writing_systems"] == {"cjk": 3, "latin": 1}


def test_json_output_equals_the_library_result(capsys, shapes, tmp_path):
    code, out, _ = run(capsys, "inject-noise", shapes, "-o", tmp_path / "cli.parquet",
                       "--ratio", 0.2, "--seed", 4, "--json")
    assert code == 0
    from_cli = json.loads(out)
    from_api = api.inject_noise(shapes, tmp_path / "api.parquet", ratio=0.2, seed=4).as_dict()
    for key in ("n_pairs", "requested", "moved", "noisy", "realised_ratio", "protocol"):
        assert from_cli[key] == from_api[key]
    code, out, _ = run(capsys, "inspect", shapes, "--json", "--no-decode")
    assert json.loads(out)["n_pairs"] == 200


def test_move_with_image_takes_repeats_and_commas(capsys, small_pairs, tmp_path):
    out = tmp_path / "n.parquet"
    code, _, _ = run(capsys, "inject-noise", small_pairs, "-o", out, "--move-with-image",
                     "note,caption", "--move-with-image", "note")
    assert code == 0
    assert pq.read_table(out).column("caption").to_pylist() != \
        pq.read_table(small_pairs).column("caption").to_pylist()


# ------------------------------------------------------------------------------ bad input: exit 2


def test_missing_path(capsys, tmp_path):
    code, _, err = run(capsys, "inject-noise", tmp_path / "nope.parquet", "-o", tmp_path / "o")
    assert code == 2
    assert_one_line_error(err, "nope.parquet: no such file or folder")


def test_not_parquet_and_empty(capsys, tmp_path):
    text = tmp_path / "pairs.csv"
    text.write_text("id,caption\n")
    code, _, err = run(capsys, "inspect", text)
    assert code == 2
    assert_one_line_error(err, "pairs.csv is a CSV file; ncclean reads Parquet: convert it once",
                          "p.write_table(c.read_csv(")
    empty = write_parquet(tmp_path / "empty.parquet", {"caption": [], "image": []})
    code, _, err = run(capsys, "inspect", empty)
    assert code == 2
    assert_one_line_error(err, "no rows")


def test_missing_column_lists_the_available_ones(capsys, small_pairs):
    code, _, err = run(capsys, "inspect", small_pairs, "--caption-col", "text")
    assert code == 2
    assert_one_line_error(err, "no caption column 'text'", "available columns: id, image, "
                                                           "caption, note")


def test_strict_makes_invalid_rows_an_error(capsys, tmp_path):
    path = write_parquet(tmp_path / "p.parquet", {
        "id": [1, 2, 2, 3], "caption": ["一只猫", "mixed 猫 cat", "dup", ""],
        "image": [png_bytes(), png_bytes()[:50], png_bytes(), huge_png(3000, 3000)],
    })
    code, out, _ = run(capsys, "inspect", path, "--max-image-pixels", 1_000_000)
    assert code == 0
    for fragment in ("3 invalid rows", "undecodable image", "duplicate id", "empty caption",
                     "image too large"):
        assert fragment in out
    code, _, err = run(capsys, "inspect", path, "--strict", "--max-image-pixels", 1_000_000)
    assert code == 2
    assert_one_line_error(err, "3 invalid rows", "--strict")
    # the pretrained image tower decodes later: score --strict still names the images' rows
    code, _, err = run(capsys, "score", path, "-o", tmp_path / "s.parquet", "--strict",
                       "--max-image-pixels", 1_000_000, "--image-encoder", "imagenet",
                       "--text-encoder", "e5", "--no-cache")
    assert code == 2
    assert_one_line_error(err, "3 invalid rows", "undecodable image", "image too large")


def test_refuses_to_overwrite_input(capsys, shapes):
    code, _, err = run(capsys, "inject-noise", shapes, "-o", shapes)
    assert code == 2
    assert_one_line_error(err, "is the input file")


@pytest.mark.parametrize("args, fragment", [
    (["inject-noise", "x.parquet", "-o", "y.parquet", "--ratio", "2"], "--ratio"),
    (["inject-noise", "x.parquet", "-o", "y.parquet", "--protocol", "sideways"], "--protocol"),
    (["synth", "-o", "s.parquet", "--lang", "fr"], "--lang"),
    (["inspect"], "input"),
    (["frobnicate"], "frobnicate"),
])
def test_usage_errors_are_one_line_with_exit_2(capsys, args, fragment):
    code, _, err = run(capsys, *args)
    assert code == 2
    assert_one_line_error(err, fragment, "--help")


def test_internal_errors_are_one_line_and_debug_shows_the_traceback(capsys, shapes, monkeypatch,
                                                                    tmp_path):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(api, "inject_noise", broken)
    code, _, err = run(capsys, "inject-noise", shapes, "-o", tmp_path / "o.parquet")
    assert code == 3
    assert_one_line_error(err, "internal error: ZeroDivisionError: boom", "--debug")
    code, _, err = run(capsys, "--debug", "inject-noise", shapes, "-o", tmp_path / "o.parquet")
    assert code == 3 and "Traceback" in err and "ZeroDivisionError: boom" in err


def test_console_script_exit_code_in_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ncclean", "inspect", str(tmp_path / "none")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert_one_line_error(done.stderr, "no such file or folder")


def test_methods_lists_parameters_and_what_decides_an_unset_default(capsys):
    code, out, _ = run(capsys, "methods", "crcl")
    assert code == 0
    assert "target = auto (rank with update=epoch, p with update=batch)" in out
    assert "score = label    allowed: label | mean-rank" in out
    code, out, _ = run(capsys, "methods", "gmm")
    assert code == 0 and "warmup_epochs = auto (clip(round(320 / steps per epoch), 1, 10)" in out
    code, out, _ = run(capsys, "methods", "auto")  # score's default names no method of its own
    assert code == 0 and out.startswith("auto: score's default: clip on pretrained towers")
    code, out, _ = run(capsys, "methods")
    assert code == 0 and out.lstrip().startswith("auto ")


def test_clip_on_two_widths_without_alignment_is_one_line(capsys, tmp_path):
    import numpy as np

    rows = np.random.default_rng(0).normal(size=(20, 12)).astype(np.float32)
    path = write_parquet(tmp_path / "emb.parquet", {"caption": [f"c{i}" for i in range(20)],
                                                    "img": list(rows), "txt": list(rows[:, :5])})
    code, _, err = run(capsys, "score", path, "-o", tmp_path / "o.parquet", "--method", "clip",
                       "--image-emb-col", "img", "--text-emb-col", "txt", "-p", "align=none")
    assert code == 2
    assert_one_line_error(err, "different widths (12 and 5)", "align=cca")
    code, _, err = run(capsys, "score", path, "-o", tmp_path / "o.parquet", "--method", "clip",
                       "--image-emb-col", "img", "--text-emb-col", "txt")
    assert code == 0, err


def test_methods_json_lists_every_method_with_its_parameters(capsys):
    code, out, _ = run(capsys, "methods", "--json")
    assert code == 0
    described = {m["name"]: m for m in json.loads(out)}
    assert {"clip", "gmm", "pc2", "crcl", "sdd", "disncl"} <= set(described)
    assert any(p["name"] == "align" for p in described["clip"]["params"])
    code, out, _ = run(capsys, "methods", "gmm", "--json")
    assert code == 0 and [m["name"] for m in json.loads(out)] == ["gmm"]
