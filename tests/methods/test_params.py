"""Declared method parameters: every bad value is one line and exit 2, on every built-in method
that has the parameter; ``ncclean methods NAME`` shows what each parameter allows."""

from __future__ import annotations

import pytest

from ncclean.cli import main
from ncclean.errors import BadOptionError
from ncclean.methods.base import BUILTIN, get_method, make_method, param_specs

BAD_VALUES = [("final", "foo"), ("robust_loss", "hardst"), ("epochs", "0"), ("epochs", "-1"),
              ("lr", "-1"), ("lr", "0"), ("batch_size", "1"), ("p_threshold", "1.5"),
              ("negatives", "random"), ("update", "step"), ("align", "pca"),
              ("epochs", "two")]
CASES = [(method, key, value) for method in sorted(BUILTIN) for key, value in BAD_VALUES
         if key in param_specs(get_method(method))]


def test_the_table_covers_the_bars():
    covered = {(method, key) for method, key, _ in CASES}
    for method in ("gmm", "pc2", "sdd"):
        assert (method, "final") in covered and (method, "epochs") in covered
    for method in ("gmm", "pc2"):
        assert (method, "robust_loss") in covered
    for method in ("gmm", "pc2", "sdd", "crcl", "clip"):
        assert (method, "lr") in covered


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from ncclean import api

    path = tmp_path_factory.mktemp("params") / "pairs.parquet"
    api.synth(path, n_images=4, captions_per_image=2, seed=0)
    return path


@pytest.mark.parametrize(("method", "key", "value"), CASES)
def test_a_bad_value_is_one_line_and_exit_2(method, key, value, corpus, tmp_path, capsys):
    code = main(["score", str(corpus), "-o", str(tmp_path / "out.parquet"), "--method", method,
                 "-p", f"{key}={value}"])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"parameter {key!r} of {method!r}" in lines[0] and value in lines[0], lines[0]
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize(("method", "key", "value"), CASES)
def test_the_library_raises_the_same_error(method, key, value):
    with pytest.raises(BadOptionError, match=f"parameter '{key}' of '{method}'"):
        make_method(method, {key: value})
    with pytest.raises(BadOptionError):  # values given in Python are checked as well
        get_method(method)(**{key: value})


def test_epochs_twice_with_different_values_is_an_error(corpus, tmp_path, capsys):
    code = main(["score", str(corpus), "-o", str(tmp_path / "out.parquet"), "--method", "gmm",
                 "--epochs", "2", "-p", "epochs=3"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--epochs 2 and -p epochs=3 disagree" in err


def test_crcl_cross_parameter_rules_are_checked_at_construction():
    with pytest.raises(BadOptionError, match="measure=pool needs update=epoch"):
        make_method("crcl", {"update": "batch", "measure": "pool"})
    with pytest.raises(BadOptionError, match="target=rank needs update=epoch"):
        make_method("crcl", {"update": "batch", "target": "rank"})
    with pytest.raises(BadOptionError, match="every piece needs at least one epoch"):
        make_method("crcl", {"pieces": "3,0"})
    assert make_method("crcl", {"pieces": "3, 4"}).pieces == (3, 4)


def test_every_builtin_parameter_is_declared_with_help_and_rules():
    for name in BUILTIN:
        cls = get_method(name)
        for spec in param_specs(cls).values():
            assert spec.help, f"{name}.{spec.name} has no help"
            if spec.default is None:
                assert spec.rule, f"{name}.{spec.name} defaults to None without a rule"
        assert cls.departures, f"{name} states no departures from its paper"
        assert all(d.endswith((".", ")")) for d in cls.departures)


def test_methods_name_shows_allowed_values_rules_and_departures(capsys):
    assert main(["methods", "gmm"]) == 0
    out = capsys.readouterr().out
    assert "final = mean" in out and "allowed: mean | last" in out
    assert "robust_loss = mean" in out and "allowed: mean | hardest" in out
    assert "lr = 0.0002" in out and "allowed: > 0" in out
    assert "epochs = auto (clip(round(1280 / steps per epoch), 4, 40)" in out
    assert "departures from the paper:" in out and "benchmarks/results/gmm.md" in out
