"""The pipeline knows no method and no tower by name: methods and towers are found through
their registries, and what a method does beyond the common steps is its own
(:mod:`ncclean.methods.applied`)."""

import ast
from pathlib import Path

import ncclean.pipeline
from ncclean.methods.base import available_methods
from ncclean.models.registry import DEFAULT_TOWERS, IMAGE_TOWERS, TEXT_TOWERS

PIPELINE = Path(ncclean.pipeline.__file__).parent


def _literals(tree: ast.AST):
    """Every string constant of ``tree`` that is not a docstring, with its line."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_method_or_tower_name_is_quoted_in_the_pipeline():
    names = {*available_methods(), *IMAGE_TOWERS, *TEXT_TOWERS, *DEFAULT_TOWERS,
             *(tower for pair in DEFAULT_TOWERS.values() for tower in pair)}
    found = [f"{path.name}:{line}: {value!r}"
             for path in sorted(PIPELINE.glob("*.py"))
             for line, value in _literals(ast.parse(path.read_text()))
             if value in names or value.split("_")[0] in names and "_" in value]
    assert not found, "method or tower names in ncclean/pipeline/: " + "; ".join(found)


def test_the_check_sees_a_quoted_name(tmp_path):
    source = 'def f(meta):\n    """clip and gmm in a docstring are fine."""\n' \
             '    return meta["method"] == "gmm"\n'
    assert sorted(value for _, value in _literals(ast.parse(source))) == ["gmm", "method"]
