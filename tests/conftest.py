"""Shared fixtures: tiny corpora written in a fraction of a second."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import huge_png, png_bytes, write_parquet

# The suite scores tiny corpora many times: the towers trained from scratch keep it fast and its
# expectations fixed. tests/test_default_pipeline.py checks the pretrained default itself. Set
# here, at import, so the CLI subprocesses the tests start inherit it.
os.environ.setdefault("NCCLEAN_TOWERS", "scratch")
# Off a terminal the command line logs a progress line every few seconds; the tests read stderr
# line by line, so they get none (tests/cli/test_progress.py checks the lines themselves).
os.environ.setdefault("NCCLEAN_PROGRESS_EVERY", "inf")


@pytest.fixture(scope="session")
def huge_png_bytes() -> bytes:
    return huge_png()


@pytest.fixture(scope="session")
def shapes(tmp_path_factory) -> Path:
    """A 40-image, 200-pair synthetic corpus (session-wide, read-only)."""
    from ncclean import api

    path = tmp_path_factory.mktemp("shapes") / "shapes.parquet"
    api.synth(path, n_images=40, captions_per_image=5, seed=0)
    return path


@pytest.fixture
def small_pairs(tmp_path) -> Path:
    """Six pairs over three distinct images, one of them twice under different ids."""
    red, green, blue = png_bytes((200, 0, 0)), png_bytes((0, 200, 0)), png_bytes((0, 0, 200))
    return write_parquet(tmp_path / "pairs.parquet", {
        "id": ["a", "b", "c", "d", "e", "f"],
        "image": [red, red, green, blue, blue, green],
        "caption": ["a red box", "red square", "green", "blue thing", "a blue box", "gramastar"],
        "note": [1, 2, 3, 4, 5, 6],
    })


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
