"""What a method is, and how ncclean finds them (built in or from plugins).

A method is a dataclass subclassing :class:`Method`. Its fields are its hyperparameters, with the
paper's values as defaults and no logic (scikit-learn's estimator convention). ``fit`` receives
the corpus's :class:`~ncclean.models.features.Features` and a :class:`Context` (seed, device,
progress, how to build a fresh matcher) and returns a :class:`MethodResult`: one clean
probability per pair, the method's own columns, and the trained matcher. A method never reads
files, prints, or writes: :func:`ncclean.testing.check_method` checks that, and every method,
built-in or plugin, must pass it.

Plugins register a :class:`Method` subclass under the ``ncclean.methods`` entry-point group::

    [project.entry-points."ncclean.methods"]
    mymethod = "my_package.module:MyMethod"
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ncclean.errors import BadOptionError, UnknownMethodError
from ncclean.methods.applied import Application, MatcherSimilarity
from ncclean.progress import Progress, no_progress

ENTRY_POINT_GROUP = "ncclean.methods"

BUILTIN: dict[str, str] = {
    "clip": "ncclean.methods.clip:Clip",
    "crcl": "ncclean.methods.crcl:CRCL",
    "disncl": "ncclean.methods.disncl:DisNCL",
    "gmm": "ncclean.methods.gmm:GMM",
    "pc2": "ncclean.methods.pc2:PC2",
    "sdd": "ncclean.methods.sdd:SDD",
}


def param(default: Any, *, low: float | None = None, high: float | None = None,
          low_open: bool = False, high_open: bool = False, rule: str | None = None,
          help: str = "") -> Any:
    """A method's hyperparameter: a dataclass field with its default and the values it allows.

    ``low``/``high`` bound a number (``low_open``/``high_open``: the bound itself is excluded);
    the allowed words of a text parameter are its ``Literal[...]`` annotation. ``rule`` says what
    ``None`` means where the default is chosen from the corpus (``"320 steps"``); ``help`` is one
    line for ``ncclean methods NAME``. The registry checks every value once
    (:func:`check_params`), so ``fit`` never has to.
    """
    return field(default=default, metadata={"low": low, "high": high, "low_open": low_open,
                                            "high_open": high_open, "rule": rule, "help": help})


@dataclass(frozen=True)
class ParamSpec:
    """What one declared parameter allows: its type, default, allowed words and bounds."""

    name: str
    kind: type
    default: Any
    optional: bool
    choices: tuple[str, ...] | None
    low: float | None
    high: float | None
    low_open: bool
    high_open: bool
    rule: str | None
    help: str

    def allowed(self) -> str:
        """The allowed values in words: ``mean | hardest``, ``> 0``, ``[0, 1]``, ``an integer``."""
        if self.choices:
            text = " | ".join(self.choices)
        elif self.low is not None and self.high is not None:
            text = (f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = {bool: "true | false", int: "an integer", float: "a number"}.get(
                self.kind, "text")
        if self.kind is int and not self.choices and text not in ("an integer",):
            text = f"an integer {text}"
        return text + (" | auto" if self.optional else "")

    def check(self, value: Any, method: str) -> Any:
        """``value`` converted from text where needed and checked; :class:`BadOptionError`
        (one line naming the method, the parameter and what is allowed) otherwise."""
        where = f"parameter {self.name!r} of {method!r}"
        said_none = isinstance(value, str) and value.lower() in ("none", "auto")
        if value is None or (said_none and self.optional):
            if self.optional:
                return None
            raise BadOptionError(f"{where} needs a value: {self.allowed()}")
        try:
            value = _convert(value, self.kind)
        except (TypeError, ValueError):
            raise BadOptionError(f"{where}: {value!r} is not {self.allowed()}") from None
        if self.choices is not None and value not in self.choices:
            raise BadOptionError(f"{where}: {value!r} is not one of {', '.join(self.choices)}")
        if self.kind in (int, float):
            if not math.isfinite(value):
                raise BadOptionError(f"{where}: {value!r} is not a finite number")
            too_low = self.low is not None and (value <= self.low if self.low_open
                                                else value < self.low)
            too_high = self.high is not None and (value >= self.high if self.high_open
                                                  else value > self.high)
            if too_low or too_high:
                bounds = self.allowed().removeprefix("an integer ").removesuffix(" | auto")
                bounds = f"in {bounds}" if bounds[0] in "[(" else bounds
                raise BadOptionError(f"{where}: {value!r} must be {bounds}")
        return value


def _convert(value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(value)
    if kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(value)
        return value
    return value


def param_specs(cls: type) -> dict[str, ParamSpec]:
    """The declared parameters of method class ``cls``, in field order. A field's type is read
    from its annotation: ``int``, ``float``, ``bool``, ``str`` or ``Literal["a", "b"]``, each
    optionally ``| None`` (then ``None``, written ``auto`` on the command line, lets the method
    choose)."""
    hints = typing.get_type_hints(cls)
    specs = {}
    for spec_field in dataclasses.fields(cls):
        hint = hints.get(spec_field.name, Any)
        args = typing.get_args(hint)
        optional = type(None) in args
        if optional:
            inner = [a for a in args if a is not type(None)]
            hint = inner[0] if len(inner) == 1 else Any
        choices = None
        if typing.get_origin(hint) is Literal:
            choices = tuple(str(a) for a in typing.get_args(hint))
            kind: type = str
        elif hint in (int, float, bool, str):
            kind = hint
        else:
            kind = object
        meta = spec_field.metadata
        default = spec_field.default if spec_field.default is not dataclasses.MISSING else None
        specs[spec_field.name] = ParamSpec(
            name=spec_field.name, kind=kind, default=default, optional=optional,
            choices=choices, low=meta.get("low"), high=meta.get("high"),
            low_open=bool(meta.get("low_open")), high_open=bool(meta.get("high_open")),
            rule=meta.get("rule"), help=meta.get("help", ""))
    return specs


def check_params(cls: type, params: Mapping[str, Any] | None, name: str | None = None
                 ) -> dict[str, Any]:
    """``params`` (from ``-p key=value`` text or Python values) checked against ``cls``'s
    declared parameters and converted to their types. Unknown names and bad values raise
    :class:`BadOptionError`, one line each."""
    name = name or getattr(cls, "name", cls.__name__)
    specs = param_specs(cls)
    values = {}
    for key, value in (params or {}).items():
        key = key.replace("-", "_")
        if key not in specs:
            raise BadOptionError(f"method {name!r} has no parameter {key!r}; parameters: "
                                 f"{', '.join(specs)}")
        values[key] = specs[key].check(value, name)
    return values


@dataclass
class Context:
    """What a method may use besides its features.

    ``new_matcher(k)`` builds the ``k``-th freshly initialised matcher of the run (seeded from
    ``seed`` and ``k``); ``initial`` is a matcher loaded with ``--load-matcher``, if any.
    """

    seed: int = 0
    device: str = "cpu"
    progress: Progress = no_progress
    matcher_config: Any = None
    initial: Any = None
    checkpoint_dir: Path | None = None
    resume: bool = False

    @property
    def frozen_images(self) -> bool:
        """Whether the matcher's image tower is a head on fixed vectors (the epoch rules of
        ``gmm`` and ``crcl`` give it the same few passes at every corpus size)."""
        return self.matcher_config is not None and self.matcher_config.frozen_images

    def new_matcher(self, k: int = 0):
        from ncclean.models.matcher import build_matcher
        from ncclean.seeds import derive_seed

        if self.matcher_config is None:
            raise ValueError("this context has no matcher configuration")
        return build_matcher(self.matcher_config, seed=derive_seed(self.seed, "matcher", k))


@dataclass
class MethodResult:
    """What :meth:`Method.fit` returns, one entry per pair of its features.

    ``clean_prob``: ``(n_pairs,)`` in [0, 1]; ``columns``: the method's own ``(n_pairs,)``
    arrays, each named ``<method>_<signal>``; ``matcher``: the trained matcher (or ensemble) the
    later stages score with; ``noise_rate``: the method's estimate of the share of noisy pairs,
    ``noise_interval`` its 95% interval where the method gives one (``clip`` against shuffled
    pairs; the default cut sizes the review queue by it, :meth:`ncclean.options.Cut.with_queue`);
    ``report``: JSON-ready facts for the sidecar (mixture parameters, per-epoch history).
    Optional: ``embeddings`` (:class:`ncclean.train.scoring.Embeddings`) when the method already
    has the matcher's embeddings or has no matcher; ``donor_space``
    (:class:`ncclean.stages.pseudocaption.DonorSpace`) when pseudo-captions should be searched
    in a space of the method's own; ``partition`` (``(n_pairs,)`` names: ``noisy``, ``vague``,
    ``clean_significant``) when the method draws its own partitions instead of the cut on
    ``clean_prob`` (SDD); ``significance`` the significance mode the method asks for when the
    user chose none; ``alignment`` the CCA the method fitted on the pairs (``clip``), which a
    saved fit keeps for the pairs it applies to, and ``neighbourhood`` the fitted pairs whose
    agreement ``clip`` adds to its cosine (:mod:`ncclean.methods.neighbours`), kept the same way,
    as is ``scripts``, the shift of each writing system's caption vectors before the CCA
    (:mod:`ncclean.methods.scripts`); ``members`` the fits whose ``clean_prob`` this one averages
    (``clip``'s widths, :mod:`ncclean.methods.clip_widths`), each kept for the applied pairs.
    """

    clean_prob: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    matcher: Any = None
    noise_rate: float | None = None
    noise_interval: tuple[float, float] | None = None
    report: dict[str, Any] = field(default_factory=dict)
    embeddings: Any = None
    donor_space: Any = None
    partition: Any = None
    significance: str | None = None
    alignment: Any = None
    neighbourhood: Any = None
    scripts: Any = None
    members: tuple = ()

    @property
    def noise_ci95(self) -> list[float] | None:
        """``noise_interval`` as run records and fits hold it: ``[low, high]`` or ``None``."""
        return None if self.noise_interval is None else [float(v) for v in self.noise_interval]


@dataclass
class Method(ABC):
    """Base class of every method; subclasses are dataclasses of hyperparameters."""

    name: ClassVar[str]
    summary: ClassVar[str]
    trains_matcher: ClassVar[bool] = True
    #: How a fit of this method on a sample scores a pair it did not train on
    #: (:mod:`ncclean.methods.applied`): by default the final matcher's cosine, read by quantile.
    application: ClassVar[Application] = MatcherSimilarity()
    #: The smallest corpus (valid pairs) the method was measured to rank well on: a mean AUROC of
    #: 0.85 over seeded subsets of clip art at 30% noise (``benchmarks/results/small-corpora.md``);
    #: below it ``score`` warns.
    min_pairs: ClassVar[int] = 0
    #: Where ``min_pairs`` holds, when the minimum depends on the matcher
    #: (:meth:`measured_minimum`), for ``ncclean methods NAME``.
    min_pairs_where: ClassVar[str] = ""
    #: Where the method departs from its paper, one sentence each (``ncclean methods NAME``).
    departures: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        # Values given in Python are checked like ``-p`` values; bad ones raise BadOptionError.
        for spec in param_specs(type(self)).values():
            setattr(self, spec.name, spec.check(getattr(self, spec.name), self.name))
        self.check()

    def measured_minimum(self, features, context: Context) -> int:
        """The smallest corpus (valid pairs) the method was measured to rank well on with these
        ``features`` and ``context``'s matcher: ``min_pairs``, unless the method's minimum
        depends on them."""
        return self.min_pairs

    def own_partitions(self) -> str | None:
        """Why this method (with these parameters) draws the partitions itself instead of
        ``score``'s cut on ``clean_prob``, in words for the line that refuses a cut option it
        would ignore (:meth:`ncclean.options.Cut.named`); ``None`` where the cut draws them."""
        return None

    def check(self) -> None:
        """Rules that join two parameters (``measure=...`` needs ``update=epoch``); raise
        :class:`BadOptionError`. Single-value rules are declared with :func:`param`."""
        return None

    @abstractmethod
    def fit(self, features, context: Context) -> MethodResult:
        """Score every pair of ``features``."""

    def params(self) -> dict[str, Any]:
        """The hyperparameters as a plain dict (for sidecars)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# -------------------------------------------------------------------------------------- registry


def _plugins() -> dict[str, list[metadata.EntryPoint]]:
    found: dict[str, list[metadata.EntryPoint]] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, []).append(entry)
    return found


def available_methods() -> dict[str, str]:
    """Every method name and where it comes from (``module:Class``), built-ins first. A name
    claimed twice maps to a description of the clash."""
    names: dict[str, list[str]] = {name: [target] for name, target in BUILTIN.items()}
    for name, entries in _plugins().items():
        names.setdefault(name, []).extend(entry.value for entry in entries)
    return {name: targets[0] if len(targets) == 1 else "clash: " + ", ".join(targets)
            for name, targets in names.items()}


def _valid_names() -> str:
    return ", ".join(n for n, t in available_methods().items() if not t.startswith("clash"))


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``; :class:`UnknownMethodError` listing the valid
    names when there is none, or when two packages claim it."""
    target = available_methods().get(name)
    if target is None:
        raise UnknownMethodError(f"unknown method {name!r}; valid methods: {_valid_names()}")
    if target.startswith("clash"):
        raise UnknownMethodError(f"method name {name!r} is claimed more than once ({target[7:]}); "
                                 f"uninstall one; valid methods: {_valid_names()}")
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise UnknownMethodError(f"method {name!r} ({target}) cannot be loaded: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise UnknownMethodError(f"method {name!r} ({target}) is not an ncclean Method")
    return cls


def make_method(name: str, params: Mapping[str, Any] | None = None) -> Method:
    """An instance of method ``name`` with ``params`` (strings are converted to the field's type,
    as they come from ``--param key=value``), every value checked against its declaration."""
    cls = get_method(name)
    return cls(**check_params(cls, params, name))


def describe_methods(name: str | None = None) -> list[dict]:
    """Every method (built in and from plugins) in name order, or only ``name``
    (:class:`~ncclean.errors.UnknownMethodError` when there is none): ``name``, ``summary``,
    ``error`` (why it cannot be loaded, else ``None``), ``params`` (``name``, ``default``,
    ``rule``, ``allowed``, ``help`` each) and ``departures`` (from its paper)."""
    described = []
    for method in [name] if name is not None else list(available_methods()):
        try:
            cls = get_method(method)
        except UnknownMethodError as error:
            if name is not None:
                raise
            described.append({"name": method, "summary": "", "error": str(error),
                              "params": [], "departures": [], "min_pairs": 0,
                              "min_pairs_where": ""})
            continue
        params = [{"name": spec.name, "default": spec.default, "rule": spec.rule,
                   "allowed": spec.allowed(), "help": spec.help}
                  for spec in param_specs(cls).values()]
        described.append({"name": method, "summary": getattr(cls, "summary", ""), "error": None,
                          "params": params, "departures": list(getattr(cls, "departures", ())),
                          "min_pairs": getattr(cls, "min_pairs", 0),
                          "min_pairs_where": getattr(cls, "min_pairs_where", "")})
    return described
