"""Matcher checkpoints: weights in safetensors, everything else in a JSON sidecar.

``matcher.safetensors`` holds the tensors of every ensemble member (``member0.image_tower...``);
``matcher.safetensors.json`` holds the :class:`MatcherConfig` (vocabulary included), the number of
members, the seed, the package versions and whatever the caller adds. No pickle anywhere: a
checkpoint from an untrusted source cannot run code.

A member may also be a *wrapper*: heads around a plain matcher (or an ensemble of them), such as
DisNCL's :class:`~ncclean.methods.disncl.DisentangledMatcher`, whose ``encode_*`` give its own
space. The JSON then names the wrapper from the closed list :data:`WRAPPERS` with the arguments
that rebuild it (``"wrapper": {"name": ..., "args": {...}, "backbone_members": k or null}``)
and the format is ``ncclean-matcher/2``, which an ncclean that predates wrappers refuses by name.
Plain matchers are still written as ``ncclean-matcher/1``, byte for byte as before, and both
formats load.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

from ncclean.data.parquet import atomic_path, sidecar_path, write_json
from ncclean.errors import CheckpointError
from ncclean.models.matcher import Ensemble, Matcher, MatcherConfig
from ncclean.provenance import versions

FORMAT = "ncclean-matcher/1"
#: The format of a checkpoint whose members are wrappers (:data:`WRAPPERS`).
WRAPPED_FORMAT = "ncclean-matcher/2"
#: The wrappers a checkpoint may hold: JSON name -> (module, class). A closed list, so the JSON
#: chooses among these and never names code of its own. A wrapper class has a ``backbone``
#: (a :class:`Matcher` or an :class:`Ensemble` of them), ``checkpoint_args()`` (a JSON-able dict)
#: and ``__init__(backbone, **checkpoint_args())``; its ``state_dict`` holds the backbone's.
WRAPPERS: dict[str, tuple[str, str]] = {
    "disentangled": ("ncclean.models.disentangled", "DisentangledMatcher"),
}


def _describe(member: Any) -> dict[str, Any] | None:
    """``None`` for a plain matcher, else the JSON that rebuilds the wrapper around one."""
    if isinstance(member, Matcher):
        return None
    kind = type(member)
    name = next((name for name, (module, cls) in WRAPPERS.items()
                 if kind.__module__ == module and kind.__name__ == cls), None)
    backbone = getattr(member, "backbone", None)
    inner = list(backbone.members) if isinstance(backbone, Ensemble) else [backbone]
    if name is None or not all(isinstance(m, Matcher) for m in inner):
        raise CheckpointError(f"cannot save a {kind.__name__}: a checkpoint holds plain matchers "
                              f"and the wrappers {sorted(WRAPPERS)} around them")
    return {"name": name, "args": dict(member.checkpoint_args()),
            "backbone_members": len(inner) if isinstance(backbone, Ensemble) else None}


def _build(config: MatcherConfig, wrapper: dict[str, Any] | None, path: Path) -> Any:
    """An untrained member shaped as the JSON says: a plain matcher or a wrapper around one."""
    if wrapper is None:
        return Matcher(config)
    try:
        module, cls = WRAPPERS[wrapper["name"]]
        k = wrapper.get("backbone_members")
        backbone = Matcher(config) if k is None else \
            Ensemble([Matcher(config) for _ in range(int(k))])
        return getattr(importlib.import_module(module), cls)(backbone, **wrapper["args"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path}: cannot rebuild its {wrapper.get('name')!r} matcher "
                              f"(known: {sorted(WRAPPERS)}; {error})") from None


def save_matcher(path: str | os.PathLike, matcher: Matcher | Ensemble,
                 meta: dict[str, Any] | None = None) -> Path:
    """Write ``matcher`` (a single matcher is saved as a one-member ensemble), atomically: plain
    matchers, or members that are all the same wrapper from :data:`WRAPPERS`."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members = list(matcher.members) if isinstance(matcher, Ensemble) else [matcher]
    wrappers = [_describe(member) for member in members]
    if any(wrapper != wrappers[0] for wrapper in wrappers):
        raise CheckpointError("cannot save an ensemble of differently built matchers")
    tensors = {f"member{k}.{name}": value.detach().cpu().contiguous()
               for k, member in enumerate(members)
               for name, value in member.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))
    wrapper = {"wrapper": wrappers[0]} if wrappers[0] is not None else {}
    write_json(sidecar_path(path), {
        "format": FORMAT if not wrapper else WRAPPED_FORMAT,
        "members": len(members),
        "config": members[0].config.to_dict(),
        **wrapper,
        "versions": versions("torch"),
        **(meta or {}),
    })
    return path


def load_matcher(path: str | os.PathLike, device: str = "cpu", *,
                 plain: bool = False) -> Ensemble:
    """Load a checkpoint written by :func:`save_matcher` as an :class:`Ensemble` (eval mode) of
    plain matchers, or of the wrappers the checkpoint names (their ``encode_*`` as saved).
    ``plain``: refuse a checkpoint of wrappers (a method starts from plain matchers only)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    meta_path = sidecar_path(path)
    if not path.exists() or not meta_path.exists():
        raise CheckpointError(f"no matcher checkpoint at {path} (need {path.name} and "
                              f"{meta_path.name})")
    try:
        meta = json.loads(meta_path.read_text())
        tensors = load_file(str(path), device=device)
    except (json.JSONDecodeError, SafetensorError, OSError) as error:
        raise CheckpointError(f"cannot read matcher checkpoint {path}: {error}") from None
    if meta.get("format") not in (FORMAT, WRAPPED_FORMAT):
        raise CheckpointError(f"{path} is not an ncclean matcher checkpoint "
                              f"(format {meta.get('format')!r}, expected {FORMAT!r} or "
                              f"{WRAPPED_FORMAT!r})")
    wrapper = meta.get("wrapper") if meta["format"] == WRAPPED_FORMAT else None
    if meta["format"] == WRAPPED_FORMAT and not isinstance(wrapper, dict):
        raise CheckpointError(f"{path}: format {WRAPPED_FORMAT!r} without its wrapper")
    if plain and wrapper is not None:
        raise CheckpointError(f"{path} holds a {wrapper.get('name')!r} matcher (heads around a "
                              "plain one); a method can start from a plain matcher only")
    config = MatcherConfig.from_dict(meta["config"])
    members = []
    for k in range(int(meta["members"])):
        prefix = f"member{k}."
        member = _build(config, wrapper, path)
        state = {name[len(prefix):]: value for name, value in tensors.items()
                 if name.startswith(prefix)}
        try:
            member.load_state_dict(state)
        except RuntimeError as error:
            raise CheckpointError(f"{path}: weights do not fit the saved configuration "
                                  f"({str(error).splitlines()[0]})") from None
        members.append(member)
    return Ensemble(members).to(device).eval()


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON sidecar of a checkpoint."""
    meta_path = sidecar_path(path)
    try:
        return json.loads(Path(meta_path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"cannot read {meta_path}: {error}") from None
