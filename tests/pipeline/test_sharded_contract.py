"""A sharded run keeps every row and scores each by its own content: shard names that could
collide, ids repeated across shards, a saved fit applied to another corpus, a damaged fit, the
options a fit fixes, and the checks made before any work (the output folder, ``--save-fit``,
shards that disagree, an empty corpus)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli.test_contract import one_line, run
from tests.pipeline.corpora import vector_table, write_shards

VECTORS = ["--image-emb-col", "img", "--text-emb-col", "txt", "--no-cache"]
CLIP = ["--method", "clip", *VECTORS]


def outputs(folder: Path) -> pa.Table:
    """Every output shard of ``folder`` (sub-folders included), in sorted path order."""
    files = sorted(p for p in folder.rglob("*.parquet")
                   if not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return pa.concat_tables([pq.read_table(p).replace_schema_metadata(None) for p in files])


def test_shards_whose_flat_names_collide_each_keep_their_rows(tmp_path, capsys):
    table = vector_table(600)
    (tmp_path / "in" / "a").mkdir(parents=True)
    pq.write_table(table.slice(0, 200), tmp_path / "in" / "a__b.parquet")
    pq.write_table(table.slice(200, 200), tmp_path / "in" / "a" / "b.parquet")
    pq.write_table(table.slice(400, 200), tmp_path / "in" / "c.parquet")
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    out = outputs(tmp_path / "out")
    assert sorted(out.column("id").to_pylist()) == sorted(table.column("id").to_pylist())
    assert (tmp_path / "out" / "a" / "b.parquet").exists()
    assert (tmp_path / "out" / "a__b.parquet").exists()


def test_an_id_repeated_in_a_later_shard_is_invalid_and_keeps_its_row(tmp_path, capsys):
    table = vector_table(400, seed=2)
    ids = table.column("id").to_pylist()
    ids[250], ids[390] = ids[10], ids[260]  # a first shard's id in the second; one within it
    table = table.set_column(0, "id", pa.array(ids))
    write_shards(table, tmp_path / "in", 2)
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    out = outputs(tmp_path / "out")
    assert out.column("id").to_pylist() == ids
    parts = out.column("partition").to_pylist()
    reasons = out.column("invalid_reason").to_pylist()
    assert parts[250] == parts[390] == "invalid"
    assert reasons[250] == f"duplicate id: {ids[10]!r} appears earlier"
    assert parts[10] != "invalid" and parts[260] != "invalid"
    assert sum(p == "invalid" for p in parts) == 2


def test_one_pass_and_shards_mark_the_same_repeated_ids(tmp_path, capsys):
    table = vector_table(300, seed=4)
    ids = table.column("id").to_pylist()
    ids[200] = ids[5]
    table = table.set_column(0, "id", pa.array(ids))
    pq.write_table(table, tmp_path / "one.parquet")
    write_shards(table, tmp_path / "in", 3)
    assert run(capsys, "score", tmp_path / "one.parquet", "-o", tmp_path / "one-out.parquet",
               *CLIP)[0] == 0
    assert run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)[0] == 0
    one = pq.read_table(tmp_path / "one-out.parquet")
    sharded = outputs(tmp_path / "out")
    assert one.column("invalid_reason").to_pylist() == sharded.column("invalid_reason").to_pylist()


def _tar(path: Path, keys: list[str], seed: int) -> None:
    import io

    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w") as tar:
        for key in keys:
            vector = rng.normal(size=8)
            members = {f"{key}.txt": f"caption {key} {seed}".encode(),
                       f"{key}.json": json.dumps({"img": vector.tolist(),
                                                  "txt": (vector + 0.1).tolist()}).encode()}
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_a_key_repeated_in_a_later_tar_is_invalid_and_keeps_its_row(tmp_path, capsys):
    (tmp_path / "wds").mkdir()
    _tar(tmp_path / "wds" / "00000.tar", [f"k{i}" for i in range(30)], 0)
    _tar(tmp_path / "wds" / "00001.tar", [f"k{i}" for i in range(25, 55)], 1)
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    out = outputs(tmp_path / "out")
    assert out.num_rows == 60
    later = out.slice(30)
    parts = later.column("partition").to_pylist()
    assert parts[:5] == ["invalid"] * 5 and "invalid" not in parts[5:]


def test_a_saved_fit_scores_another_corpus_by_its_vectors_not_its_ids(tmp_path, capsys):
    first = vector_table(300, noise=0.3, seed=0)
    pq.write_table(first, tmp_path / "first.parquet")
    code, _, err = run(capsys, "score", tmp_path / "first.parquet", "-o", tmp_path / "f.parquet",
                       *CLIP, "--save-fit", tmp_path / "fit")
    assert code == 0, err
    other = vector_table(300, noise=0.3, seed=9)  # the same ids p0..p299, other pairs
    pq.write_table(other, tmp_path / "other.parquet")
    code, out, err = run(capsys, "score", tmp_path / "other.parquet", "-o",
                         tmp_path / "o.parquet", *VECTORS, "--fit", tmp_path / "fit")
    assert code == 0, err
    assert "the estimated noise rate is the saved fit's, read on its own sample" in out
    code, out, err = run(capsys, "split", tmp_path / "o.parquet", "-o", tmp_path / "sp",
                         "--report")
    assert code == 0, err
    assert "on the saved fit's sample, not this corpus" in out
    from sklearn.metrics import roc_auc_score

    scored = pq.read_table(tmp_path / "o.parquet")
    noisy = np.asarray(scored.column("noisy_gt").to_pylist())
    prob = np.asarray(scored.column("clean_prob").to_pylist())
    assert roc_auc_score(~noisy, prob) > 0.9
    own = pq.read_table(tmp_path / "f.parquet")
    assert not np.allclose(prob, np.asarray(own.column("clean_prob").to_pylist()))
    # and the fit's own corpus, applied, is the one pass's
    assert run(capsys, "score", tmp_path / "first.parquet", "-o", tmp_path / "again.parquet",
               *VECTORS, "--fit", tmp_path / "fit")[0] == 0
    again = pq.read_table(tmp_path / "again.parquet")
    assert again.column("clean_prob").equals(own.column("clean_prob"))


@pytest.fixture()
def saved_fit(tmp_path, capsys):
    pq.write_table(vector_table(200, seed=1), tmp_path / "in.parquet")
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path / "s.parquet",
                       *CLIP, "--save-fit", tmp_path / "fit", "--seed", "3")
    assert code == 0, err
    return tmp_path / "fit"


def _damage(fit: Path, how: str) -> None:
    from safetensors.numpy import load_file, save_file

    meta = json.loads((fit / "fit.json").read_text())
    arrays = load_file(str(fit / "fit.safetensors"))
    if how == "json-list":
        (fit / "fit.json").write_text("[]")
    elif how == "no-method":
        (fit / "fit.json").write_text(json.dumps({k: v for k, v in meta.items()
                                                  if k != "method"}))
    elif how == "other-method":
        (fit / "fit.json").write_text(json.dumps(meta | {"method": "pc2"}))
    elif how == "says-gmm":  # a clip fit's arrays under gmm's name: no pool, no matcher
        (fit / "fit.json").write_text(json.dumps(meta | {"method": "gmm"}))
    elif how == "array-missing":
        save_file({k: v for k, v in arrays.items() if k != "table.y"},
                  str(fit / "fit.safetensors"))
    elif how == "uneven":
        arrays["sample.clean_prob"] = arrays["sample.clean_prob"][:-3]
        save_file(arrays, str(fit / "fit.safetensors"))
    elif how == "truncated":
        data = (fit / "fit.safetensors").read_bytes()
        (fit / "fit.safetensors").write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("how", ["json-list", "no-method", "other-method", "says-gmm",
                                 "array-missing", "uneven", "truncated"])
def test_a_damaged_fit_is_one_line_and_leaves_no_folder(saved_fit, tmp_path, capsys, how):
    _damage(saved_fit, how)
    target = tmp_path / "new" / "out"
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", target, *VECTORS,
                       "--fit", saved_fit)
    assert code == 2, err
    assert str(saved_fit) in one_line(err)
    assert not (tmp_path / "new").exists()


def test_a_gmm_fit_without_its_matcher_is_one_line(tmp_path, capsys):
    pq.write_table(vector_table(120, seed=1), tmp_path / "in.parquet")
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path / "s.parquet",
                       "--method", "gmm", "-p", "epochs=2", "-p", "warmup_epochs=1", *VECTORS,
                       "--save-fit", tmp_path / "fit")
    assert code == 0, err
    (tmp_path / "fit" / "matcher.safetensors").unlink()
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path / "new" / "o",
                       *VECTORS, "--fit", tmp_path / "fit")
    assert code == 2 and "matcher.safetensors" in one_line(err)
    assert not (tmp_path / "new").exists()


def test_the_fit_hash_covers_its_matcher(tmp_path):
    from ncclean.pipeline.fit import fit_hash

    fit = tmp_path / "fit"
    fit.mkdir()
    for name in ("fit.json", "fit.safetensors"):
        (fit / name).write_bytes(b"same")
    (fit / "matcher.safetensors").write_bytes(b"one")
    first = fit_hash(fit)
    (fit / "matcher.safetensors").write_bytes(b"two")
    assert fit_hash(fit) != first


@pytest.mark.parametrize("option", [["--method", "gmm"], ["--seed", "0"], ["--seed", "5"],
                                    ["--clean-above", "0.9"], ["-p", "align=none"],
                                    ["--noise-rate", "0.2"]])
def test_an_option_the_fit_fixes_given_otherwise_is_refused(saved_fit, tmp_path, capsys,
                                                            option):
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path / "o.parquet",
                       *VECTORS, "--fit", saved_fit, *option)
    assert code == 2, err
    assert option[0] in one_line(err) and "fit" in err


def test_options_equal_to_the_fits_are_accepted(saved_fit, tmp_path, capsys):
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path / "o.parquet",
                       *VECTORS, "--fit", saved_fit, "--seed", "3", "--method", "clip")
    assert code == 0, err


def test_an_output_inside_the_input_folder_is_refused(tmp_path, capsys):
    write_shards(vector_table(200), tmp_path / "in", 2)
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "in" / "out", *CLIP)
    assert code == 2 and "inside the input" in one_line(err)
    assert not (tmp_path / "in" / "out").exists()


def test_an_output_folder_where_a_file_is_is_refused(tmp_path, capsys):
    write_shards(vector_table(200), tmp_path / "in", 2)
    (tmp_path / "afile").write_text("mine")
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", f"{tmp_path / 'afile'}/", *CLIP)
    assert code == 2 and "a file is in the way" in one_line(err)
    assert (tmp_path / "afile").read_text() == "mine"


def test_a_folder_run_measures_detection_as_a_run_on_one_file(tmp_path, capsys):
    table = vector_table(400, noise=0.3, seed=4)
    write_shards(table, tmp_path / "in", 3)
    code, out, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    assert "against noisy_gt" in out
    found = json.loads((tmp_path / "out" / "ncclean.json").read_text())["detection_vs_noisy_gt"]
    scored = outputs(tmp_path / "out")
    valid = np.array(scored["partition"].to_pylist()) != "invalid"
    from ncclean.evaluate.detection import detection_metrics

    expected = detection_metrics(np.array(scored["noisy_gt"].to_pylist())[valid],
                                 np.array(scored["clean_prob"].to_pylist())[valid],
                                 np.array(scored["partition"].to_pylist())[valid] == "noisy")
    assert found == expected.as_dict() and found["n_noisy"] > 0


def test_a_shard_of_one_caption_is_applied_like_any_other(tmp_path, capsys):
    table = vector_table(600, seed=5)
    one = table.column("txt")[450].as_py()  # the last shard: one collection's label
    captions = table.column("caption").to_pylist()[:450] + ["gramastar"] * 150
    texts = table.column("txt").to_pylist()[:450] + [one] * 150
    table = table.set_column(1, "caption", pa.array(captions)).set_column(
        table.schema.get_field_index("txt"), "txt", pa.array(texts, table.schema.field("txt").type))
    write_shards(table, tmp_path / "in", 4)
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out",
                       "--fit-sample", "300", *CLIP)
    assert code == 0, err
    assert outputs(tmp_path / "out").column("id").to_pylist() == table.column("id").to_pylist()
    texts[450:] = [[0.5] * len(one)] * 150  # one vector for other captions: a failed job
    table = table.set_column(1, "caption", pa.array([f"c{k}" for k in range(600)])).set_column(
        table.schema.get_field_index("txt"), "txt", pa.array(texts, table.schema.field("txt").type))
    write_shards(table, tmp_path / "in2", 4)
    code, _, err = run(capsys, "score", tmp_path / "in2", "-o", tmp_path / "out2",
                       "--fit-sample", "300", *CLIP)
    assert code == 2 and "holds one vector in all 150 usable rows" in one_line(err)


def test_a_file_scored_into_its_own_folder_never_replaces_itself(tmp_path, capsys):
    pq.write_table(vector_table(200), tmp_path / "in.parquet")
    before = (tmp_path / "in.parquet").read_bytes()
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", tmp_path, *CLIP)
    assert code == 2 and "would replace the input" in one_line(err)
    assert (tmp_path / "in.parquet").read_bytes() == before
    assert not (tmp_path / "ncclean.json").exists()


def test_an_output_ending_in_a_slash_is_a_folder(tmp_path, capsys):
    pq.write_table(vector_table(200), tmp_path / "in.parquet")
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", "-o", f"{tmp_path / 'new'}/",
                       *CLIP)
    assert code == 0, err
    assert (tmp_path / "new" / "in.parquet").is_file()
    code, _, err = run(capsys, "score", tmp_path / "in.parquet", f"-o{tmp_path / 'bad'}/",
                       "--method", "nope", *VECTORS)
    assert code == 2 and not (tmp_path / "bad").exists()  # a failed run leaves no folder


def test_folder_asked_reads_every_spelling_of_the_output():
    from ncclean.cli.options import folder_asked

    for argv in (("-o", "d/"), ("--output", "d/"), ("--output=d/",), ("-od/",), ("-o=d/",)):
        assert folder_asked(("score", "in.parquet", *argv)), argv
    assert not folder_asked(("score", "in.parquet", "-o", "d.parquet"))
    assert not folder_asked(("score", "in/",))


def test_an_output_folder_keeps_files_a_scoring_run_did_not_write(tmp_path, capsys):
    pq.write_table(vector_table(200), tmp_path / "noisy.parquet")
    (tmp_path / "split").mkdir()
    pq.write_table(vector_table(50, seed=1), tmp_path / "split" / "noisy.parquet")  # split's
    before = (tmp_path / "split" / "noisy.parquet").read_bytes()
    args = ("score", tmp_path / "noisy.parquet", "-o", tmp_path / "split", *CLIP)
    code, _, err = run(capsys, *args)
    assert code == 2 and "was not written by a scoring run" in one_line(err)
    assert (tmp_path / "split" / "noisy.parquet").read_bytes() == before
    code, _, err = run(capsys, *args, "--overwrite")
    assert code == 0, err
    assert pq.read_metadata(tmp_path / "split" / "noisy.parquet").num_rows == 200
    code, _, err = run(capsys, *args)  # the scoring run's own output: a rerun resumes
    assert code == 0, err


def _immutable(folder: Path) -> bool:
    """Make ``folder`` unwritable even for root (``chattr +i``); whether that worked."""
    import subprocess

    if not shutil.which("chattr"):
        return False
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


@pytest.mark.parametrize("where", ["output", "inside-output", "save-fit"])
def test_a_read_only_folder_is_refused_before_the_fit(tmp_path, capsys, monkeypatch, where):
    import subprocess

    import ncclean.pipeline.sharded as sharded

    write_shards(vector_table(200), tmp_path / "in", 2)
    locked = tmp_path / "locked"
    locked.mkdir()
    if not _immutable(locked):
        pytest.skip("chattr +i is not available here")
    try:
        monkeypatch.setattr(sharded, "_fit", lambda *a, **k: pytest.fail("fitted first"))
        args = {"output": ["-o", locked], "inside-output": ["-o", locked / "sub"],
                "save-fit": ["-o", tmp_path / "out", "--save-fit", locked / "fit"]}[where]
        code, _, err = run(capsys, "score", tmp_path / "in", *args, *CLIP)
        assert code == 2, err
        assert str(locked) in one_line(err)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert not (tmp_path / "out").exists()


def test_the_output_and_save_fit_folders_are_checked_before_the_fit(tmp_path, capsys,
                                                                     monkeypatch):
    import ncclean.data.atomic as atomic
    import ncclean.pipeline.sharded as sharded

    write_shards(vector_table(200), tmp_path / "in", 2)
    order = []
    real_probe, real_fit = atomic.probe_writable, sharded._fit
    monkeypatch.setattr(atomic, "probe_writable",
                        lambda out: order.append(Path(out).parent.name) or real_probe(out))
    monkeypatch.setattr(sharded, "_fit", lambda *a, **k: order.append("FIT") or real_fit(*a, **k))
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out",
                       "--save-fit", tmp_path / "fit", *CLIP)
    assert code == 0, err
    assert order.index("out") < order.index("FIT") and order.index("fit") < order.index("FIT")


def test_a_killed_runs_scratch_is_removed_by_the_next_run(tmp_path, capsys):
    write_shards(vector_table(200), tmp_path / "in", 2)
    (tmp_path / "out").mkdir()
    dead = tmp_path / "out" / ".ncclean-scratch-999999999-abc"  # no such process
    dead.mkdir()
    (dead / "sample.parquet").write_bytes(b"x" * 1000)
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    assert not dead.exists()
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_the_fit_sample_is_written_beside_the_output_not_in_the_system_temp(tmp_path, capsys,
                                                                              monkeypatch):
    import ncclean.pipeline.sharded as sharded

    write_shards(vector_table(200), tmp_path / "in", 2)
    seen = []
    real = sharded.write_sample
    monkeypatch.setattr(sharded, "write_sample",
                        lambda *a, **k: seen.append(Path(a[4])) or real(*a, **k))
    # a sample smaller than the corpus (a corpus no larger than it is fitted in place)
    assert run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", "--fit-sample", "100",
               *CLIP)[0] == 0
    assert seen and seen[0].parent.parent == tmp_path / "out"
    assert seen[0].parent.name.startswith(".ncclean-scratch-")


def test_a_zero_byte_shard_is_one_line_naming_it(tmp_path, capsys):
    write_shards(vector_table(200), tmp_path / "in", 2)
    (tmp_path / "in" / "part-002.parquet").write_bytes(b"")
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 2 and "part-002.parquet" in one_line(err)


@pytest.mark.parametrize("fixed", [False, True])
def test_shards_of_other_vector_widths_are_one_line_naming_one(tmp_path, capsys, fixed):
    def table(d: int, seed: int) -> pa.Table:
        t = vector_table(100, d=d, seed=seed)
        if not fixed:
            return t
        return t.cast(pa.schema([f.with_type(pa.list_(pa.float32(), d))
                                 if f.name in ("img", "txt") else f for f in t.schema]))

    pq.write_table(table(8, 0), _mk(tmp_path / "in") / "a.parquet")
    pq.write_table(table(12, 1), tmp_path / "in" / "b.parquet")
    code, _, err = run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)
    assert code == 2, err
    assert "b.parquet" in one_line(err) or "a.parquet" in one_line(err)


def _mk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_an_empty_tar_names_the_input_not_a_temp_file(tmp_path, capsys):
    (tmp_path / "wds").mkdir()
    with tarfile.open(tmp_path / "wds" / "00000.tar", "w"):
        pass
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out", *CLIP)
    assert code == 2
    line = one_line(err)
    assert "wds" in line and "sample.parquet" not in line and "ncclean-" not in line


@pytest.mark.parametrize("layout", ["file", "image-shards"])
def test_a_folder_output_of_images_names_what_was_asked(tmp_path, capsys, shapes, layout):
    if layout == "file":
        source = shapes
        (tmp_path / "existing").mkdir()
        target = tmp_path / "existing"
    else:
        source = tmp_path / "shards"
        source.mkdir()
        table = pq.read_table(shapes)
        pq.write_table(table.slice(0, 50), source / "a.parquet")
        pq.write_table(table.slice(50), source / "b.parquet")
        target = tmp_path / "out"
    code, _, err = run(capsys, "score", source, "-o", target)
    assert code == 2
    line = one_line(err)
    assert "--fit" not in line and "--save-fit" not in line and "--fit-sample" not in line
    assert "vectors" in line


def test_a_sharded_run_leaves_nothing_but_its_outputs(tmp_path, capsys):
    write_shards(vector_table(300), tmp_path / "in", 3)
    before = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    started = time.time()
    assert run(capsys, "score", tmp_path / "in", "-o", tmp_path / "out", *CLIP)[0] == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["ncclean.json", "part-000.parquet", "part-001.parquet", "part-002.parquet"]
    after = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    ours = [n for n in after - before if n.startswith("ncclean-fit-")]
    assert not ours and time.time() - started < 120
    shutil.rmtree(tmp_path / "out")


def test_a_tar_without_pairs_among_others_is_skipped_and_recorded(tmp_path, capsys):
    (tmp_path / "wds").mkdir()
    _tar(tmp_path / "wds" / "00000.tar", [f"k{i}" for i in range(30)], 0)
    with tarfile.open(tmp_path / "wds" / "00001.tar", "w"):
        pass  # img2dataset writes one when every download of a shard failed
    _tar(tmp_path / "wds" / "00002.tar", [f"m{i}" for i in range(30)], 2)
    code, _, err = run(capsys, "score", tmp_path / "wds", "-o", tmp_path / "out", *CLIP)
    assert code == 0, err
    assert outputs(tmp_path / "out").num_rows == 60
    record = json.loads((tmp_path / "out" / "ncclean.json").read_text())
    assert record["empty_shards"] == ["00001"] and record["n_rows"] == 60
