"""Every script in ``examples/`` runs, on a tiny corpus, and writes what it says it writes."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ncclean.cli import main as cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def python_api_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("python_api")
    return out, _load("python_api").main(["--out", str(out), "--tiny"])


def test_python_api_scores_splits_checks_and_retrains(python_api_run):
    out, results = python_api_run
    scored = pq.read_table(out / "scored.parquet")
    assert scored.num_rows == results["scored"].n_pairs == 90
    assert {"clean_prob", "partition", "pseudo_caption"} <= set(scored.column_names)
    assert results["scored"].detection is not None
    assert sum(pq.ParquetFile(p).metadata.num_rows
               for p in (out / "split").glob("*.parquet")) == 90
    assert (out / "report.html").stat().st_size > 1000
    assert results["check"].verdict.startswith(("PASS", "FAIL"))
    assert results["check"].passed == (results["check"].shares["noisy"] <= 0.5)
    assert {"cleaned", "noisy", "oracle"} <= set(results["retrain"].arms)


def test_walkthrough_saves_the_plots(tmp_path):
    plots = _load("walkthrough").main(["--out", str(tmp_path), "--tiny"])
    assert len(plots) >= 2
    for path in plots:
        assert path.exists() and path.stat().st_size > 200
        if path.suffix == ".svg":
            assert path.read_text().startswith("<svg")
    assert (tmp_path / "report.html").exists()


def test_sharded_corpus_is_scored_as_one(tmp_path):
    summary = _load("sharded").main(["--out", str(tmp_path), "--tiny"])
    assert len(list((tmp_path / "shards").glob("*.parquet"))) == 3
    assert pq.read_table(summary.output).num_rows == 90 == summary.n_pairs


def test_ci_workflow_gate_runs_as_written(python_api_run, capsys):
    yaml = pytest.importorskip("yaml")
    out, _ = python_api_run
    workflow = yaml.safe_load((EXAMPLES / "ci" / "ncclean-check.yml").read_text())
    steps = workflow["jobs"]["check"]["steps"]
    commands = [step["run"] for step in steps if "run" in step]
    assert any(c.startswith("ncclean score") for c in commands)
    gate = next(c for c in commands if "ncclean check" in c)
    # The gate step as written, with this test's files in place of the repository's: with an
    # accepted summary, and on the first run, without one.
    lines = gate.replace("\\\n", " ").splitlines()
    assert any('against="--against data/accepted-summary.json"' in line for line in lines)
    line = next(line for line in lines if "ncclean check" in line)
    line = line.replace("scored.parquet", str(out / "scored.parquet"))
    for against in (f"--against {out / 'split' / 'summary.json'}", ""):
        argv = shlex.split(line.replace("$against", against).split(">")[0])
        assert argv[:2] == ["ncclean", "check"]
        code = cli(argv[1:])
        verdict = json.loads(capsys.readouterr().out)
        assert code == (0 if verdict["passed"] else 1)
        assert (verdict["previous"] is None) == (against == "")
