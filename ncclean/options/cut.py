"""The cut of a scoring run (:class:`Cut`): thresholds, recall bands, the queue sized by the noise
estimate, and the presets (:data:`PRESETS`). Part of :mod:`ncclean.options`, which re-exports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ncclean.errors import BadOptionError
from ncclean.records import as_record

if TYPE_CHECKING:
    import numpy as np


def _at_least(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadOptionError(f"{name} must be a number (at least {low}), got "
                             f"{type(value).__name__} {value!r}")
    if math.isnan(value) or value < low:
        raise BadOptionError(f"{name} must be at least {low}, got {value!r}")


@dataclass(frozen=True)
class Cut:
    """How clean probabilities become partitions (:func:`ncclean.stages.partition.partition`).

    ``clean_prob >= clean_above`` is clean, ``< noisy_below`` noisy, between them vague; or, with
    ``noise_rate`` (a share in [0, 1], or ``"auto"``: the method's estimate, filled in by
    :meth:`with_estimate`), the lowest share is noisy. ``noisy_recall`` and ``review_recall``
    widen the thresholds' partitions by what the scores expect: ``noisy`` is at least the lowest
    pairs that hold ``noisy_recall`` of the expected noisy pairs (the sum of ``1 - clean_prob``),
    ``noisy`` and ``vague`` together at least those holding ``review_recall``
    (:func:`ncclean.data.results.recall_threshold`); :meth:`with_recall` fills in
    ``recall_noisy_below`` and ``recall_clean_above`` from a run's scores, and
    :meth:`thresholds` gives the thresholds in force. ``rare_clean_above``: a lower clean
    threshold for pairs whose caption occurs at most ``rare_count`` times among the valid pairs;
    ``rare_count`` also says which clean captions the specificity stage leaves significant.
    ``queue_by_estimate``: where the thresholds flag more pairs than the method's estimate of
    the noise says there can be, the review queue (``noisy`` with ``vague``) is cut back to the
    lower end of that estimate's interval (:meth:`with_queue` fills in ``queue_clean_above``);
    thresholds a user gives turn it off unless asked for too (:meth:`with_options`).
    ``Cut()`` is the single 0.5 cut; ``score`` uses :data:`DEFAULT_CUT`. A ``noise_rate``
    replaces the thresholds: with one, thresholds other than these two defaults are an error
    (they would be ignored), and the record leaves them out.
    """

    clean_above: float = 0.5
    noisy_below: float = 0.5
    noise_rate: float | str | None = None
    rare_clean_above: float | None = None
    rare_count: int = 2
    preset: str | None = None  # the PRESETS entry this cut came from, if any
    noisy_recall: float | None = None
    review_recall: float | None = None
    recall_noisy_below: float | None = None  # filled in by with_recall
    recall_clean_above: float | None = None
    queue_by_estimate: bool = False
    queue_clean_above: float | None = None  # filled in by with_queue

    def __post_init__(self) -> None:
        for name in ("clean_above", "noisy_below"):  # api.score's keywords take anything
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadOptionError(f"--{name.replace('_', '-')} ({name}=) must be a number "
                                     f"in [0, 1], got {value!r}")
        self._check_recall()
        if not 0.0 <= self.noisy_below <= self.clean_above <= 1.0:
            raise BadOptionError(
                f"need 0 <= --noisy-below ({self.noisy_below}) <= --clean-above "
                f"({self.clean_above}) <= 1")
        if isinstance(self.noise_rate, str) and self.noise_rate != "auto":
            raise BadOptionError(f"--noise-rate must be a number in [0, 1] or auto, got "
                                 f"{self.noise_rate!r}")
        if isinstance(self.noise_rate, int | float) and not 0.0 <= self.noise_rate <= 1.0:
            raise BadOptionError(f"--noise-rate must lie in [0, 1], got {self.noise_rate}")
        if self.noise_rate is not None and (self.clean_above, self.noisy_below) not in _UNSET:
            raise BadOptionError(
                f"--noise-rate cuts by a share and wins over thresholds, so --clean-above "
                f"{self.clean_above} / --noisy-below {self.noisy_below} would be ignored; give "
                "either --noise-rate or the thresholds")
        if self.rare_clean_above is not None:
            if self.noise_rate is not None:
                raise BadOptionError("--rare-clean-above lowers a threshold; it does not combine "
                                     "with --noise-rate")
            if not 0.0 <= self.rare_clean_above <= self.clean_above:
                raise BadOptionError(
                    f"need 0 <= --rare-clean-above ({self.rare_clean_above}) <= --clean-above "
                    f"({self.clean_above})")
        _at_least("--rare-count", self.rare_count, 1)

    def _check_recall(self) -> None:
        """The recall bands belong to the review cut: a share cut (``noise_rate``) and a
        training cut (``rare_clean_above``) drop a band left at the default's value and refuse
        any other; the resolved thresholds exist only beside their band."""
        other = "--noise-rate" if self.noise_rate is not None else (
            "--rare-clean-above" if self.rare_clean_above is not None else None)
        for name, default, reached in (("noisy_recall", _DEFAULT_RECALL[0], "recall_noisy_below"),
                                       ("review_recall", _DEFAULT_RECALL[1],
                                        "recall_clean_above")):
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            if other is not None and value == default:  # the default's band, not asked for
                object.__setattr__(self, name, value := None)
            if value is not None and not 0.0 < value <= 1.0:
                raise BadOptionError(f"{flag} must lie in (0, 1] (0 on the command line turns "
                                     f"it off), got {value}")
            if value is not None and other is not None:
                raise BadOptionError(f"{flag} widens the review cut's thresholds; {other} makes "
                                     "another cut, so give one or the other")
            if value is None:
                object.__setattr__(self, reached, None)  # no band, no threshold of one
            elif getattr(self, reached) is not None and not 0.0 <= getattr(self, reached) <= 1.0:
                raise ValueError(f"{reached} must lie in [0, 1], got {getattr(self, reached)}")
        if other is not None:  # the estimate sizes the review queue, not another cut
            object.__setattr__(self, "queue_by_estimate", False)
        if not self.queue_by_estimate:
            object.__setattr__(self, "queue_clean_above", None)
        if None not in (self.noisy_recall, self.review_recall) \
                and self.noisy_recall > self.review_recall:
            raise BadOptionError(
                f"need --noisy-recall ({self.noisy_recall}) <= --review-recall "
                f"({self.review_recall}; the defaults are {_DEFAULT_RECALL[0]} and "
                f"{_DEFAULT_RECALL[1]}): noisy is part of what is flagged")

    def with_options(self, **changes: Any) -> Cut:
        """This cut with the fields a user named replaced (``score``'s cut options,
        ``api.score``'s keywords). A threshold named without ``queue_by_estimate`` turns the
        queue by the estimate off: it would move the threshold under the value given, and the
        thresholds given are the thresholds applied (the recall bands may still raise them,
        :meth:`moved`)."""
        if {"clean_above", "noisy_below"} & changes.keys() and "queue_by_estimate" not in changes:
            changes["queue_by_estimate"] = False
        return replace(self, **changes)

    def named(self, given: frozenset[str] = frozenset()) -> list[str]:
        """The cut's options a user set, as the command line writes them (``--clean-above
        0.9``), the preset first: those named in ``given`` (the command line's) and those with a
        value neither ``Cut()`` nor :data:`DEFAULT_CUT` has. ``rare_count`` is left out: the
        significance stage reads it too."""
        named = []
        for name in ("preset", "noise_rate", "clean_above", "noisy_below", "rare_clean_above",
                     "noisy_recall", "review_recall", "queue_by_estimate"):
            value = getattr(self, name)
            if not self._set(name, given):
                continue
            if name == "queue_by_estimate":
                named.append("--queue-by-estimate" if value else "--queue-by-thresholds")
                continue
            value = 0 if value is None else value  # a band turned off: 0 on the command line
            shown = f"{value:g}" if isinstance(value, float | int) else str(value)
            named.append(f"--{name.replace('_', '-')} {shown}")
        return named

    def _set(self, name: str, given: frozenset[str]) -> bool:
        """Whether a user set field ``name``: named in ``given``, or a value that neither
        ``Cut()`` nor :data:`DEFAULT_CUT` has."""
        return name in given or getattr(self, name) not in (getattr(Cut(), name),
                                                            getattr(DEFAULT_CUT, name))

    def moved(self, given: frozenset[str] = frozenset()) -> str | None:
        """One line saying where this resolved cut's thresholds in force (:meth:`thresholds`)
        left a threshold the user gave (named in ``given``, or a value neither ``Cut()`` nor
        :data:`DEFAULT_CUT` has) and which rule moved it; ``None`` where none moved."""
        if self.noise_rate is not None:
            return None
        moved = [f"--{name.replace('_', '-')} {value:g} to {now:.4g}"
                 for name, value, now in zip(("clean_above", "noisy_below"),
                                             (self.clean_above, self.noisy_below),
                                             self.thresholds(), strict=True)
                 if now != value and self._set(name, given)]
        if not moved:
            return None
        if self.queue_clean_above is not None:
            return (f"the queue by the noise estimate (--queue-by-estimate) moved "
                    f"{' and '.join(moved)} on this run's scores; --queue-by-thresholds keeps "
                    "the thresholds given")
        return (f"the recall bands raised {' and '.join(moved)} on this run's scores (more "
                "pairs under review); --noisy-recall 0 --review-recall 0 keep the thresholds "
                "given")

    @property
    def auto(self) -> bool:
        """Whether the noise rate is the method's estimate, still to be filled in."""
        return self.noise_rate == "auto"

    def with_estimate(self, estimate: float | None, method: str = "the method") -> Cut:
        """This cut with an ``"auto"`` noise rate replaced by the method's ``estimate``, every
        other field kept; a cut that is not ``auto`` is returned as it is."""
        if not self.auto:
            return self
        if estimate is None:
            raise BadOptionError(f"--noise-rate auto: method {method!r} gives no estimate")
        return replace(self, noise_rate=float(estimate))

    @classmethod
    def from_record(cls, record: dict) -> Cut:
        """The cut a sidecar's or a fit's ``cut`` record holds (keys that are no field are
        left out; a record from before the recall bands has none)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names and v is not None}
                   | {"noise_rate": record.get("noise_rate")})

    def with_recall(self, clean_prob: np.ndarray) -> Cut:
        """This cut with ``recall_noisy_below`` and ``recall_clean_above`` computed from the
        run's ``clean_prob`` (``(n,)``, every scored pair), every other field kept; a cut
        without recall bands is returned as it is. Computed from the scores given, not from
        any earlier resolution, so a rescaled sample can be resolved again."""
        if self.noise_rate is not None or (self.noisy_recall, self.review_recall) == (None, None):
            return self
        from ncclean.data.results import recall_threshold

        def reach(recall: float | None) -> float | None:
            return None if recall is None else recall_threshold(clean_prob, recall)

        return replace(self, recall_noisy_below=reach(self.noisy_recall),
                       recall_clean_above=reach(self.review_recall))

    def with_queue(self, clean_prob: np.ndarray, interval: tuple[float, float] | None) -> Cut:
        """This cut with ``queue_clean_above`` filled in from the run's ``clean_prob``
        (``(n,)``, every scored pair) and the 95% ``interval`` of the method's noise estimate;
        every other field kept.

        Where the pairs under ``clean_above`` outnumber ``interval[1] * n``, the thresholds flag
        more than the corpus can hold: the review queue becomes the ``round(interval[0] * n)``
        lowest pairs (pairs with equal scores on one side), ``queue_clean_above`` the clean
        threshold that makes it, and the recall bands do not widen it. The interval's lower end,
        not the estimate: the estimate errs high by the clean pairs that score like shuffled
        ones, on small corpora by as much as the interval is wide, on large ones by about a
        point (``benchmarks/results/review-queue.md``). Its upper end decides whether to cut, so
        that a corpus whose thresholds flag about as many pairs as it holds (clip art as it is,
        about 2% noisy) is not cut to a tenth of its queue by a seed's difference. Where they do
        not outnumber it (noise hidden among near misses, a clean corpus) nothing changes and
        the bands widen the queue as before. Without an interval, or without
        ``queue_by_estimate``, nothing changes."""
        if not self.queue_by_estimate or interval is None:
            return replace(self, queue_clean_above=None)
        import numpy as np

        from ncclean.data.results import as_written

        values = np.asarray(clean_prob, dtype=np.float64)
        values = np.sort(as_written(np.clip(values[np.isfinite(values)], 0.0, 1.0)))
        flagged = int(np.searchsorted(values, np.float32(self.clean_above), side="left"))
        if len(values) == 0 or flagged <= interval[1] * len(values):
            return replace(self, queue_clean_above=None)
        queued = min(int(round(interval[0] * len(values))), flagged)
        return replace(self, queue_clean_above=float(values[queued]) if queued < len(values)
                       else self.clean_above)

    def thresholds(self) -> tuple[float, float]:
        """``(clean_above, noisy_below)`` in force: the given thresholds, raised to the recall
        bands' where :meth:`with_recall` filled those in (clean never below noisy); where
        :meth:`with_queue` cut the queue back, clean from ``queue_clean_above`` and noisy
        below the lower of it and the noisy threshold."""
        noisy_below = max(self.noisy_below, self.recall_noisy_below or 0.0)
        if self.queue_clean_above is not None:
            return self.queue_clean_above, min(noisy_below, self.queue_clean_above)
        clean_above = max(self.clean_above, self.recall_clean_above or 0.0, noisy_below)
        return clean_above, noisy_below

    def describe_bands(self) -> str:
        """What the recall bands (or the noise estimate) of this resolved cut did, in words."""
        if self.queue_clean_above is not None:
            return "queue cut back to the lower end of the noise estimate's interval"
        held = f"{self.noisy_recall or '-'} / {self.review_recall or '-'}"
        if self.thresholds() == (self.clean_above, self.noisy_below):
            return f"recall bands {held}: no wider"
        return f"widened so noisy / noisy and vague hold {held} of the expected noise"

    def record(self, requested: Cut, by_method: bool) -> dict[str, Any]:
        """The sidecar's ``cut``: this (resolved) cut's fields, where its noise rate came from
        (``requested``'s), and whether the method drew the partitions itself."""
        source = "auto" if requested.auto else ("given" if requested.noise_rate is not None
                                                else None)
        ignored = {"clean_above": None, "noisy_below": None} if self.noise_rate is not None \
            else {}  # a noise-rate cut uses no threshold: none is recorded
        return as_record(self) | ignored | {"noise_rate_source": source,
                                  "by": "method" if by_method else "cut"}


_UNSET = ((0.5, 0.5), (0.8, 0.5))  # Cut()'s and DEFAULT_CUT's thresholds: not asked for
_DEFAULT_RECALL = (0.5, 0.9)  # DEFAULT_CUT's recall bands
DEFAULT_CUT = Cut(clean_above=0.8, noisy_below=0.5, noisy_recall=_DEFAULT_RECALL[0],
                  review_recall=_DEFAULT_RECALL[1], queue_by_estimate=True)

#: What a scored file is for (``score --preset``): the cut ``score`` uses, and what ``retrain``
#: trains on unless ``--keep`` says otherwise. ``review``: calibrated thresholds widened by the
#: recall bands, vague pairs to look at (the default cut; benchmarks/results/natural-noise.md,
#: "Recall bands"). ``gate``: the noisy partition is the method's estimated share,
#: so ``check --max-noisy`` bounds the estimated noise rate. ``train``: rare captions clean from
#: 0.3 and retraining on ``clean_significant``, the best training set measured (117% of the
#: noisy-to-oracle gap at 50% noise with clip on pretrained towers, benchmarks/results/retrain.md).
PRESETS: dict[str, dict] = {
    "review": {"cut": {}, "keep": "clean"},
    "gate": {"cut": {"noise_rate": "auto"}, "keep": "clean"},
    "train": {"cut": {"rare_clean_above": 0.3, "noisy_recall": None, "review_recall": None},
              "keep": "significant"},
}


def preset_cut(name: str, rare_count: int = 2) -> Cut:
    """The :class:`Cut` of preset ``name`` (:data:`PRESETS`); :class:`BadOptionError` for an
    unknown name."""
    if name not in PRESETS:
        raise BadOptionError(f"--preset must be one of {', '.join(PRESETS)}, got {name!r}")
    return replace(DEFAULT_CUT, rare_count=rare_count, preset=name, **PRESETS[name]["cut"])


def preset_keep(record: dict) -> str:
    """What ``retrain`` trains on by default for a scored file with run ``record``: its
    preset's ``keep``, else ``clean``."""
    preset = ((record.get("options") or {}).get("cut") or {}).get("preset")
    return PRESETS.get(preset, PRESETS["review"])["keep"]
"""``score``'s cut: noisy below 0.5, clean from 0.8, vague between."""


