"""The CI gate's shares and verdicts, without a scoring run."""

import json

import pytest

from ncclean.errors import BadOptionError, NcCleanError
from ncclean.report.gate import check_limits, judge, previous_shares, shares

COUNTS = {"clean_significant": 60, "clean_insignificant": 10, "vague": 10, "noisy": 20,
          "invalid": 25}


def test_shares_are_of_valid_pairs_except_invalid():
    assert shares(COUNTS) == {"noisy": 0.2, "vague": 0.1, "invalid": 0.2}
    assert shares({"invalid": 3}) == {"noisy": 0.0, "vague": 0.0, "invalid": 1.0}
    assert shares({}) == {"noisy": 0.0, "vague": 0.0, "invalid": 0.0}


def test_judge_passes_within_bounds_and_fails_on_growth():
    limits = {"noisy": 0.2, "vague": None, "invalid": 0.5}
    passed = judge("x.parquet", COUNTS, limits, None, 0.01)
    assert passed.passed and passed.verdict == "PASS: noisy 20.0% <= 20.0%; invalid 20.0% <= 50.0%"
    assert passed.limits["max_increase"] == 0.01
    grew = judge("x.parquet", COUNTS, {"noisy": None, "vague": None, "invalid": None},
                 {"noisy": 0.15, "vague": 0.0, "invalid": 0.0}, 0.01)
    assert not grew.passed
    assert grew.verdict == ("FAIL: noisy 20.0% against 15.0% before (+5.0 points, over the "
                            "allowed +1.0)")
    assert grew.as_dict()["input"] == "x.parquet"


def test_limits_and_previous_runs_are_checked(tmp_path):
    with pytest.raises(BadOptionError, match="--max-vague must lie in"):
        check_limits({"noisy": None, "vague": 1.5, "invalid": None}, None)
    assert check_limits({"noisy": None, "vague": None, "invalid": None}, None) == {
        "noisy": 0.5, "vague": None, "invalid": None}  # no bound given: the default
    (tmp_path / "run.json").write_text(json.dumps({"partition_counts": COUNTS}))
    assert previous_shares(tmp_path / "run.json")["noisy"] == 0.2
    with pytest.raises(NcCleanError, match="no such file"):
        previous_shares(tmp_path / "missing.json")
    (tmp_path / "junk.json").write_text("[1]")
    with pytest.raises(NcCleanError, match="partition_counts"):
        previous_shares(tmp_path / "junk.json")
