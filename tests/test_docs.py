"""Every ``ncclean`` command in README.md and docs/*.md runs as written.

The commands are read from the fenced shell blocks (no language, ``bash``, ``sh``, ``shell``,
``console``; a line starting ``ncclean`` or ``$ ncclean``, ``\\`` continuations joined, a
trailing ``# comment`` dropped) and run in document order, one folder per document, through
the command line's own entry point. The files they name are tiny corpora made here under the
names the docs use (``pairs.parquet`` holds every column the docs name: ``caption``/``text``,
``image``/``jpg``, the vector columns); ``examples/clipart-300.parquet`` is the only path
replaced, by a 36-pair slice of it. To keep the run within a minute on two cores, training is
cut short in this process (gmm's epochs when the command gives none, retrain's steps): the
commands, their options and their outputs are the documents', the models are not.
``check`` may exit 1 (a failed gate is one of its two answers); every other command exits 0.
"""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncclean.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "bash", "sh", "shell", "console"}

CANNOT_RUN = {
    "ncclean score shards/ -o scored/ --image-emb-col img --text-emb-col txt --id-col id "
    "--fit-sample 200000 --engine ray --ray-address ray://head:10001":
        "a Ray cluster at ray://head:10001",
    "ncclean score /mnt/wds -o /mnt/scored --cache-dir /mnt/ncclean-cache --engine ray "
    "--ray-address auto": "a running Ray cluster (--ray-address auto) and its /mnt/wds",
    "ncclean embed /mnt/wds -o /mnt/vectors --half --engine ray --ray-address auto":
        "a running Ray cluster (--ray-address auto) and its /mnt/wds",
    "ncclean score /mnt/vectors -o /mnt/scored --image-emb-col image_emb --text-emb-col "
    "text_emb --id-col key --engine ray --ray-address auto":
        "a running Ray cluster (--ray-address auto) and the vectors the step before wrote",
}
"""Commands no test can run here, with what they need."""

REPLACED = {"examples/clipart-300.parquet": "clipart.parquet"}


def fenced(path: Path) -> list[tuple[str, str]]:
    """``(language, body)`` of each fenced block of ``path``, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M)


def doc_commands(path: Path) -> list[str]:
    """The ``ncclean`` commands of ``path``'s shell blocks, in order."""
    found = []
    for language, body in fenced(path):
        if language not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("ncclean "):
                found.append(" ".join(shlex.split(line, comments=True)))
    return found


COMMANDS = [(path, command) for path in DOCS for command in doc_commands(path)]


def test_the_docs_have_commands_and_every_exception_is_one_of_them():
    assert len(COMMANDS) > 20
    assert set(CANNOT_RUN) <= {command for _, command in COMMANDS}


# ---------------------------------------------------------------- the files the docs name


def _pairs(n_images: int, per_image: int, seed: int) -> pa.Table:
    """A synthetic corpus with every column a doc names: ``caption``/``text``, ``image``/``jpg``,
    ``uid``, and image and caption vectors (``img``/``img_emb``, ``txt``/``txt_emb``) that
    agree for each pair."""
    from ncclean.data.synth import synth_table

    table = synth_table(n_images, per_image, "en", seed)
    rng = np.random.default_rng(seed)
    image = rng.normal(size=(n_images, 16)).astype(np.float32)
    rows = table.column("image_id").to_numpy()
    text = image[rows] + 0.3 * rng.normal(size=(len(rows), 16)).astype(np.float32)
    vectors = {"img": image[rows], "txt": text}
    columns = {"text": table.column("caption"), "jpg": table.column("image"),
               "uid": table.column("id")}
    for name, values in vectors.items():
        columns[name] = columns[name + "_emb"] = pa.array(list(values), pa.list_(pa.float32()))
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Path:
    """The files, made once: copied into each document's folder."""
    folder = tmp_path_factory.mktemp("docs-files")
    pairs = _pairs(12, 3, seed=0)
    pq.write_table(pairs, folder / "pairs.parquet")
    pq.write_table(pairs, folder / "corpus.parquet")
    pq.write_table(_pairs(8, 2, seed=9), folder / "test.parquet")
    (folder / "shards").mkdir()
    for k, start in enumerate(range(0, pairs.num_rows, 12)):
        pq.write_table(pairs.slice(start, 12), folder / "shards" / f"part-{k}.parquet")
    clipart = pq.read_table(ROOT / "examples" / "clipart-300.parquet")
    pq.write_table(clipart.take(list(range(0, 300, 8))[:36]), folder / "clipart.parquet")
    return folder


def _labels(scored: Path, path: Path) -> None:
    table = pq.read_table(scored, columns=["id", "partition"])
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "label"])
        for k, (i, part) in enumerate(zip(table["id"].to_pylist(),
                                          table["partition"].to_pylist(), strict=True)):
            label = "mismatch" if part == "noisy" else "match" if k % 5 else "generic"
            writer.writerow([i, label])


def _provide(command: str, folder: Path, corpora: Path) -> None:
    """Make what ``command`` reads and its document did not make before it."""
    import shutil

    for name in ("pairs.parquet", "corpus.parquet", "test.parquet", "clipart.parquet",
                 "shards"):
        if name in command and not (folder / name).exists():
            copy = shutil.copytree if (corpora / name).is_dir() else shutil.copy
            copy(corpora / name, folder / name)
    if " scored.parquet" in command and not (folder / "scored.parquet").exists() \
            and "-o scored.parquet" not in command:
        assert main(["score", str(corpora / "pairs.parquet"), "-o",
                     str(folder / "scored.parquet")]) == 0
    if "last/summary.json" in command and not (folder / "last").exists():
        assert main(["split", str(folder / "scored.parquet"), "-o", str(folder / "last")]) == 0
    if "labels.csv" in command and not (folder / "labels.csv").exists():
        _labels(folder / "scored.parquet", folder / "labels.csv")


@pytest.fixture
def short_training(monkeypatch):
    """gmm's default epochs and retrain's steps cut to a few (the commands are unchanged)."""
    import ncclean.methods.gmm as gmm
    import ncclean.pipeline.retrain as retrain

    schedule, config = gmm.schedule, retrain.retrain_config

    def short_schedule(n_pairs, batch_size, warmup_epochs, epochs, frozen_images=False):
        return schedule(n_pairs, batch_size, warmup_epochs or 1, epochs or 1, frozen_images)

    def few_steps(keep, steps, eval_every, schedule_name):
        return config(keep, min(steps, 8), None if eval_every is None else 4, schedule_name)

    monkeypatch.setattr(gmm, "schedule", short_schedule)
    monkeypatch.setattr(retrain, "retrain_config", few_steps)


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_every_command_of_the_doc_runs(doc, corpora, tmp_path, monkeypatch, capsys,
                                       short_training):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NCCLEAN_CACHE", str(tmp_path / "cache"))
    ran, printed = 0, {}
    for command in doc_commands(doc):
        if command in CANNOT_RUN:
            continue
        for path, stand_in in REPLACED.items():
            command = command.replace(path, stand_in)
        _provide(command, tmp_path, corpora)
        capsys.readouterr()
        code = main(shlex.split(command)[1:])
        out, err = capsys.readouterr()
        allowed = (0, 1) if command.startswith("ncclean check") else (0,)
        assert code in allowed, f"{doc.name}: {command!r} exited {code}: {err.strip()}"
        ran, printed[command] = ran + 1, out
    if not doc_commands(doc):
        pytest.skip(f"{doc.name} has no ncclean command")
    assert ran
    for command, shown in shown_outputs(doc):
        # the noise estimate's interval is printed by the methods that give one (clip, the
        # pretrained default), not by those the scratch towers the tests use choose
        lines = [_without_interval(got) for got in printed[command].splitlines()]
        for line in shown:  # each line the doc shows, numbers and the method aside
            parts = re.split(r"(\d[\d,.]*)", " ".join(_without_interval(line).split()))
            pattern = "".join(r"[\d,.]+" if k % 2 else re.escape(part)
                              for k, part in enumerate(parts))
            pattern = pattern.replace(r"\(clip,", r"\(\w+,")
            assert any(re.fullmatch(pattern, " ".join(got.split())) for got in lines), \
                f"{doc.name} shows {line.strip()!r}; {command!r} printed:\n{printed[command]}"


SHOWN = {"README.md": ("ncclean score noisy.parquet -o scored.parquet --seed 0", "score (")}
"""The outputs a document shows: the command, and how the block showing its output begins."""


def shown_outputs(doc: Path) -> list[tuple[str, list[str]]]:
    if doc.name not in SHOWN:
        return []
    command, start = SHOWN[doc.name]
    blocks = re.findall(r"^```\n(.*?)^```", doc.read_text(), re.S | re.M)
    return [(command, next(b for b in blocks if b.startswith(start)).splitlines())]


def _without_interval(line: str) -> str:
    return re.sub(r" \(95% CI [^)]*\)", "", line)


def readme_python() -> list[str]:
    """The Python blocks of README.md."""
    return [body for language, body in fenced(ROOT / "README.md") if language == "python"]


def test_the_readme_python_runs_as_written_and_pins_no_method(corpora, tmp_path, monkeypatch,
                                                               capsys, short_training):
    """The example takes the default pipeline (a pinned ``gmm`` warns below its measured
    minimum on this 300-pair corpus), and every call in it runs."""
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NCCLEAN_CACHE", str(tmp_path / "cache"))
    shutil.copy(corpora / "clipart.parquet", tmp_path / "clipart.parquet")
    blocks = readme_python()
    assert blocks
    for block in blocks:
        assert "method=" not in block
        for path, stand_in in REPLACED.items():
            block = block.replace(path, stand_in)
        exec(compile(block, "README.md", "exec"), {})
    assert (tmp_path / "report.html").is_file()
    assert re.search(r"(PASS|FAIL): noisy", capsys.readouterr().out)
