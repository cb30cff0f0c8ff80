"""The scripts in ``benchmarks/`` measure what a user runs, so they import ncclean only through
its public API, ``ncclean.api`` (or run the ``ncclean`` command). The ones that measure an
internal piece on purpose live in ``benchmarks/kernels/`` and are not checked."""

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def internal_imports(source: str) -> list[str]:
    """Every ``ncclean`` module other than ``ncclean.api`` that ``source`` imports, at any depth
    of the file (inside functions too): ``import ncclean.x``, ``from ncclean.x import y`` and
    ``from ncclean import x``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = ([f"ncclean.{alias.name}" for alias in node.names]
                     if node.module == "ncclean" else [node.module])
        else:
            continue
        found += [name for name in names if name.split(".")[0] == "ncclean"
                  and name != "ncclean" and name.split(".")[1] != "api"]
    return found


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) > 10
    assert not any(path.parent.name == "kernels" for path in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_script_imports_only_the_public_api(script):
    assert internal_imports(script.read_text()) == [], (
        f"{script.name} imports ncclean's internals; use ncclean.api or the ncclean command, or "
        "move it to benchmarks/kernels/ if it measures an internal piece on purpose")


@pytest.mark.parametrize("source, found", [
    ("from ncclean import api\nfrom ncclean.api import Cut\nimport ncclean.api", []),
    ("import ncclean", []),
    ("import ncclean.stages.partition as p", ["ncclean.stages.partition"]),
    ("def f():\n    from ncclean.data.corpus import read_corpus", ["ncclean.data.corpus"]),
    ("from ncclean import api, options", ["ncclean.options"]),
    ("from ncclean.apis import x", ["ncclean.apis"]),
    ("from . import ncclean_x\nimport numpy", []),
])
def test_internal_imports_are_found(source, found):
    assert internal_imports(source) == found
