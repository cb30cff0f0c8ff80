"""A data-quality gate for CI: judge a scored corpus's partition shares against bounds and
against a previous run."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ncclean.data.results import INVALID, NOISY, VAGUE
from ncclean.errors import BadOptionError, NcCleanError
from ncclean.records import Summary

LIMITS = (NOISY, VAGUE, INVALID)
DEFAULT_MAX_NOISY = 0.5
"""The bound when none is given (no ``--max-*`` and no ``--against``): fail when more than half
of the valid pairs are noisy, a corpus (or a scoring run) that is broken rather than noisy."""


@dataclass(frozen=True)
class CheckResult(Summary):
    """The verdict of :func:`check_scored`: ``passed``, one line saying why, the shares it judged
    (``noisy`` and ``vague`` of the valid pairs, ``invalid`` of all rows) and the counts."""

    input: Path
    passed: bool
    verdict: str
    shares: dict[str, float]
    partition_counts: dict[str, int]
    limits: dict[str, float | None]
    previous: dict[str, float] | None = None
    warnings: list[str] = field(default_factory=list)


def shares(counts: dict[str, int]) -> dict[str, float]:
    """The ``noisy`` and ``vague`` shares of the valid rows and the ``invalid`` share of all rows,
    from the rows per partition (0 where there is nothing to divide)."""
    total = sum(counts.values())
    valid = total - counts.get(INVALID, 0)
    return {NOISY: counts.get(NOISY, 0) / valid if valid else 0.0,
            VAGUE: counts.get(VAGUE, 0) / valid if valid else 0.0,
            INVALID: counts.get(INVALID, 0) / total if total else 0.0}


def check_limits(limits: dict[str, float | None], against: str | os.PathLike | None
                 ) -> dict[str, float | None]:
    """Bounds must lie in [0, 1]; with none given and no ``against``, the default bound
    (:data:`DEFAULT_MAX_NOISY` on the noisy share). Returns the limits to judge by."""
    for name, bound in limits.items():
        if bound is not None and not 0.0 <= bound <= 1.0:
            raise BadOptionError(f"--max-{name} must lie in [0, 1], got {bound}")
    if all(bound is None for bound in limits.values()) and against is None:
        return {**limits, NOISY: DEFAULT_MAX_NOISY}
    return limits


def previous_run(against: str | os.PathLike) -> tuple[dict, dict[str, float]]:
    """A previous run's summary (a scored file's sidecar, ``split``'s ``summary.json`` or
    ``check --json`` output: anything with ``partition_counts``), read once, and its shares."""
    try:
        earlier = json.loads(Path(against).read_text())
        return earlier, shares({k: int(v) for k, v in earlier["partition_counts"].items()})
    except FileNotFoundError:
        raise NcCleanError(f"--against {against}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise NcCleanError(f"--against {against}: not a run summary with partition_counts "
                           "(use a scored file's .json sidecar, split's summary.json or "
                           "check --json output)") from None


def previous_shares(against: str | os.PathLike) -> dict[str, float]:
    """The shares of a previous run's summary (:func:`previous_run`)."""
    return previous_run(against)[1]


#: What a run chose that moves its partitions: compared against ``--against``'s run.
CUT_CHOICES = ("preset", "clean_above", "noisy_below", "noise_rate", "rare_clean_above",
               "rare_count", "noisy_recall", "review_recall", "queue_by_estimate")


def unlike_runs(scored_record: dict, earlier: dict, against: str | os.PathLike) -> list[str]:
    """What the scored file's run chose otherwise than the ``earlier`` run's summary (read from
    ``against``): its method and the choices of its cut (:data:`CUT_CHOICES`), where that
    summary records them; each a reason the two noisy shares need not agree."""
    differ = []
    method, before = scored_record.get("method"), earlier.get("method")
    if method and before and method != before:
        differ.append(f"method {before} -> {method}")
    cut, was = scored_record.get("cut") or {}, earlier.get("cut")
    if isinstance(was, dict) and isinstance(cut, dict):
        changed = [key for key in CUT_CHOICES if key in was and key in cut and was[key] != cut[key]]
        if "preset" in changed:  # a preset sets the rest
            changed = ["preset"]
        differ += [f"{key} {_value(was[key])} -> {_value(cut[key])}" for key in changed]
    if not differ:
        return []
    return [f"--against {against} was scored otherwise ({'; '.join(differ)}): its noisy share "
            "is another cut's, so the change is not the corpus's alone"]


def _value(value) -> str:
    return "none" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def judge(input: str | os.PathLike, counts: dict[str, int], limits: dict[str, float | None],
          previous: dict[str, float] | None, max_increase: float,
          audited: tuple[float, list[float], float] | None = None) -> CheckResult:
    """The verdict on ``counts`` (rows per partition of ``input``): it fails when a share exceeds
    its bound in ``limits`` (``None``: unchecked), when the noisy share grew by more than
    ``max_increase`` over ``previous``, or when ``audited`` (the labelled precision of
    ``clean_significant``, its interval and the least allowed) falls short."""
    found = shares(counts)
    failures, fine = [], []
    if audited is not None:
        precision, (low, high), least = audited
        said = (f"clean_significant precision {precision:.1%} [{low:.1%}, {high:.1%}] by the "
                f"labels")
        (failures if precision < least else fine).append(
            f"{said} {'<' if precision < least else '>='} {least:.1%}")
    for name, bound in limits.items():
        if bound is None:
            continue
        said = f"{name} {found[name]:.1%}"
        (failures if found[name] > bound else fine).append(
            f"{said} {'>' if found[name] > bound else '<='} {bound:.1%}")
    if previous is not None:
        change = found[NOISY] - previous[NOISY]
        said = (f"noisy {found[NOISY]:.1%} against {previous[NOISY]:.1%} before "
                f"({change * 100:+.1f} points")
        (failures if change > max_increase else fine).append(
            f"{said}, {'over' if change > max_increase else 'within'} the allowed "
            f"{max_increase * 100:+.1f})")
    passed = not failures
    verdict = ("PASS: " + "; ".join(fine)) if passed else ("FAIL: " + "; ".join(failures))
    return CheckResult(input=Path(input), passed=passed, verdict=verdict, shares=found,
                       partition_counts=counts, limits=limits | {"max_increase": max_increase},
                       previous=previous)


def check_scored(input: str | os.PathLike, limits: dict[str, float | None],
                 against: str | os.PathLike | None = None,
                 max_increase: float = 0.01, labels: str | os.PathLike | None = None,
                 min_precision: float = 0.9) -> CheckResult:
    """Judge the scored file ``input`` (:func:`judge`), ``against`` a previous run's summary if
    given, and with ``labels`` (``audit``'s CSV) on the labelled precision of
    ``clean_significant`` (at least ``min_precision``); the limits are checked before the file
    is read (none given: the default, :func:`check_limits`)."""
    from ncclean.data.scored import open_scored

    if labels is not None and not 0 <= min_precision <= 1:
        raise BadOptionError(f"--min-precision must be in [0, 1], got {min_precision}")
    limits = check_limits(limits, against) if labels is None or any(
        v is not None for v in limits.values()) or against is not None else limits
    earlier, previous = previous_run(against) if against is not None else (None, None)
    scored = open_scored(input)
    audited = None
    if labels is not None:
        from ncclean.report.audit import estimate, read_labels

        found = estimate(scored, read_labels(labels),
                         labels_file=labels)["partitions"]["clean_significant"]
        if not found["labelled"]:
            raise BadOptionError(f"--labels {labels}: no labelled pair is clean_significant")
        audited = (found["precision"], found["ci"], min_precision)
    result = judge(input, scored.counts(), limits, previous, max_increase, audited)
    if against is not None:
        result = replace(result, warnings=unlike_runs(scored.sidecar, earlier, against))
    return result
