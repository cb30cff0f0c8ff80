"""Matcher checkpoints: weights in safetensors, everything else in a JSON sidecar.

``matcher.safetensors`` holds the tensors of every ensemble member (``member0.image_tower...``);
``matcher.safetensors.json`` holds the :class:`MatcherConfig` (vocabulary included), the number of
members, the seed, the package versions and whatever the caller adds. No pickle anywhere: a
checkpoint from an untrusted source cannot run code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ncclean.data.parquet import atomic_path, sidecar_path, write_json
from ncclean.errors import CheckpointError
from ncclean.models.matcher import Ensemble, Matcher, MatcherConfig
from ncclean.provenance import versions

FORMAT = "ncclean-matcher/1"


def save_matcher(path: str | os.PathLike, matcher: Matcher | Ensemble,
                 meta: dict[str, Any] | None = None) -> Path:
    """Write ``matcher`` (a single matcher is saved as a one-member ensemble), atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members = list(matcher.members) if isinstance(matcher, Ensemble) else [matcher]
    if not all(isinstance(member, Matcher) for member in members):
        raise CheckpointError(f"cannot save a {type(matcher).__name__}: a checkpoint holds "
                              "plain matchers only")
    tensors = {f"member{k}.{name}": value.detach().cpu().contiguous()
               for k, member in enumerate(members)
               for name, value in member.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))
    write_json(sidecar_path(path), {
        "format": FORMAT,
        "members": len(members),
        "config": members[0].config.to_dict(),
        "versions": versions("torch"),
        **(meta or {}),
    })
    return path


def load_matcher(path: str | os.PathLike, device: str = "cpu") -> Ensemble:
    """Load a checkpoint written by :func:`save_matcher` as an :class:`Ensemble` (eval mode)."""
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
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an ncclean matcher checkpoint "
                              f"(format {meta.get('format')!r}, expected {FORMAT!r})")
    config = MatcherConfig.from_dict(meta["config"])
    members = []
    for k in range(int(meta["members"])):
        prefix = f"member{k}."
        member = Matcher(config)
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
