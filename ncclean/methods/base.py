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
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ncclean.errors import BadOptionError, NcCleanError
from ncclean.progress import Progress, no_progress

ENTRY_POINT_GROUP = "ncclean.methods"

BUILTIN: dict[str, str] = {
    "clip": "ncclean.methods.clip:Clip",
    "crcl": "ncclean.methods.crcl:CRCL",
    "gmm": "ncclean.methods.gmm:GMM",
    "pc2": "ncclean.methods.pc2:PC2",
    "sdd": "ncclean.methods.sdd:SDD",
}


class UnknownMethodError(NcCleanError):
    """No method, or more than one, answers to the requested name."""


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
        ``gmm`` and ``crcl`` give it a fifth of the steps)."""
        return self.matcher_config is not None and self.matcher_config.frozen_images

    def new_matcher(self, k: int = 0):
        from ncclean.models.matcher import build_matcher

        if self.matcher_config is None:
            raise ValueError("this context has no matcher configuration")
        return build_matcher(self.matcher_config, seed=self.seed * 1009 + k)


@dataclass
class MethodResult:
    """What :meth:`Method.fit` returns, one entry per pair of its features.

    ``clean_prob``: ``(n_pairs,)`` in [0, 1]; ``columns``: the method's own ``(n_pairs,)``
    arrays, each named ``<method>_<signal>``; ``matcher``: the trained matcher (or ensemble) the
    later stages score with; ``noise_rate``: the method's estimate of the share of noisy pairs;
    ``report``: JSON-ready facts for the sidecar (mixture parameters, per-epoch history).
    Optional: ``embeddings`` (:class:`ncclean.train.scoring.Embeddings`) when the method already
    has the matcher's embeddings or has no matcher; ``donor_space``
    (:class:`ncclean.stages.pseudocaption.DonorSpace`) when pseudo-captions should be searched
    in a space of the method's own; ``partition`` (``(n_pairs,)`` names: ``noisy``, ``vague``,
    ``clean_significant``) when the method draws its own partitions instead of the cut on
    ``clean_prob`` (SDD); ``significance`` the significance mode the method asks for when the
    user chose none.
    """

    clean_prob: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    matcher: Any = None
    noise_rate: float | None = None
    report: dict[str, Any] = field(default_factory=dict)
    embeddings: Any = None
    donor_space: Any = None
    partition: Any = None
    significance: str | None = None


@dataclass
class Method(ABC):
    """Base class of every method; subclasses are dataclasses of hyperparameters."""

    name: ClassVar[str]
    summary: ClassVar[str]
    trains_matcher: ClassVar[bool] = True

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


def _parse(value: Any, annotation: Any, default: Any) -> Any:
    if not isinstance(value, str):
        return value
    kind = type(default) if default is not None else None
    text = str(annotation)
    if kind is bool or text.startswith("bool"):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if value.lower() in ("none", "auto") and (default is None or "None" in text):
        return None
    if kind is int or (kind is None and text.startswith("int")):
        return int(value)
    if kind is float or (kind is None and text.startswith("float")):
        return float(value)
    return value


def make_method(name: str, params: Mapping[str, Any] | None = None) -> Method:
    """An instance of method ``name`` with ``params`` (strings are converted to the field's type,
    as they come from ``--param key=value``)."""
    cls = get_method(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in (params or {}).items():
        key = key.replace("-", "_")
        if key not in fields:
            raise BadOptionError(f"method {name!r} has no parameter {key!r}; parameters: "
                                 f"{', '.join(fields)}")
        default = fields[key].default if fields[key].default is not dataclasses.MISSING else None
        try:
            values[key] = _parse(value, fields[key].type, default)
        except ValueError as error:
            raise BadOptionError(f"parameter {key!r} of {name!r}: {error}") from None
    return cls(**values)
