"""Importing torchvision's dependants (open_clip, timm) where torchvision's operators do not load.

torchvision 0.28.0 with the CPU build of torch 2.13.0 fails at import with ``operator
torchvision::nms does not exist``: its compiled operators do not load, and its Python code then
registers fakes for two of them. :func:`import_guarded` catches exactly that error, drops the
half-imported modules, declares the two operators' schemas (``nms`` and ``qnms``) and imports
again; the transforms, timm and open_clip then work (torchvision's own ``nms`` does not, and
ncclean does not use it). Where torchvision loads, it does nothing.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

_schemas: Any = None  # the torch.library.Library holding the schemas, kept alive
_DEPENDANTS = ("torchvision", "open_clip", "timm")


def import_guarded(name: str) -> ModuleType:
    """``import name`` through the guard (module docstring). ``ImportError`` passes through."""
    global _schemas
    try:
        return importlib.import_module(name)
    except RuntimeError as error:
        if "torchvision::nms" not in str(error) or _schemas is not None:
            raise
        import torch

        for module in [m for m in sys.modules if m.split(".")[0] in _DEPENDANTS]:
            del sys.modules[module]
        _schemas = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            _schemas.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return importlib.import_module(name)
