"""The corpus families that the leave-one-out rule tables hold out together
(``loco_rules.py``, ``loco_band.py``; ``benchmarks/results/rules.md``).

A *family* is a corpus with its subsets and with every corpus that shares its images, so that
no rule is chosen on a copy of the pictures it is then scored on: AppStream's summaries and
descriptions are one family, clip art's 300-pair sample is clip art's. A corpus is named
``STEM`` or ``STEM-SIZE``.
"""

from __future__ import annotations

FAMILIES = {"appsum": "AppStream", "appdesc": "AppStream", "mdi": "MDI", "tabler": "Tabler",
            "clipart300": "clipart"}


def family(corpus: str) -> str:
    """The family of the corpus named ``corpus``."""
    stem = corpus.split("-")[0]
    return FAMILIES.get(stem, stem)
