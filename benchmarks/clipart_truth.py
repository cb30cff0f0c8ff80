"""Ground truth the clip-art benchmarks share: boilerplate captions, categories, the original
captions of each image."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

# Collection names and generic tags that are true of their picture but say nothing about it.
# The four the issue names, plus the other collection labels among the corpus's 40 most
# repeated captions (see the corpus README). Matched case-insensitively from the start.
BOILERPLATE = (
    "gramastar", "part of the flat icon collection", "lemon svg theme", "etiquette icons",
    "aiga_symbol_signs", "svg gradient collection", "various cliparts", "blueberry - iconset",
    "gold-theme", "plastik-icon-theme", "r16 sibmission", "svg road signs",
)
_PATTERN = re.compile("^(" + "|".join(re.escape(b) for b in BOILERPLATE) + ")", re.IGNORECASE)


def is_boilerplate(captions: list[str]) -> np.ndarray:
    return np.array([bool(_PATTERN.match(c.strip())) for c in captions])


def top_category(categories: list[str | None]) -> np.ndarray:
    return np.array([(c or "").split("/")[0] for c in categories], dtype=object)


def original_captions(table: dict) -> dict:
    """Image -> its captions before the noise, from a noisy or scored file's columns
    (``original_image_id``: the image ``ncclean inject-noise`` found the row's caption with;
    captions stay in their rows)."""
    out: dict = {}
    for image, caption in zip(table["original_image_id"], table["caption"]):
        out.setdefault(image, set()).add(caption)
    return out


def pseudo_caption_quality(scored: Path, donor_rows: np.ndarray | None = None) -> dict[str, float]:
    """Coverage and quality of the pseudo-captions of a scored clip-art file whose noise was
    injected with ``--move-with-image category`` (so ``category`` describes the image).

    ``donor_rows``: ``(n,)`` donor row per row (-1 for none) to judge instead of the file's own
    ``pseudo_caption_id`` (for comparing donor searches on the same partitions)."""
    table = pq.read_table(scored, columns=["image_id", "original_image_id", "caption", "category",
                                           "partition", "pseudo_caption_id", "id",
                                           "noisy_gt"]).to_pydict()
    partition = np.array(table["partition"], dtype=object)
    noisy = partition == "noisy"
    category = top_category(table["category"])
    if donor_rows is None:
        row_of = {pair_id: row for row, pair_id in enumerate(table["id"])}
        donor_rows = np.array([row_of[d] if d is not None else -1
                               for d in table["pseudo_caption_id"]])
    suggested = noisy & (donor_rows >= 0)
    same = category[donor_rows[suggested]] == category[suggested]
    clean_rows = np.isin(partition, ["clean_significant", "clean_insignificant"])
    # A random clean caption agrees with the image's category this often:
    values, counts = np.unique(category[clean_rows], return_counts=True)
    share = dict(zip(values, counts / counts.sum()))
    random_agreement = float(np.mean([share.get(c, 0.0) for c in category[suggested]]))
    originals = original_captions(table)
    exact = [table["caption"][donor_rows[r]] in originals.get(table["image_id"][r], set())
             for r in np.flatnonzero(suggested)]
    truly_noisy = np.array(table["noisy_gt"], dtype=bool)
    return {
        "noisy_pairs": int(noisy.sum()),
        "coverage": float(suggested.sum() / max(1, noisy.sum())),
        "same_category": float(same.mean()) if len(same) else float("nan"),
        "random_same_category": random_agreement,
        "original_caption": float(np.mean(exact)) if exact else float("nan"),
        "same_category_truly_noisy": float(
            np.mean(category[donor_rows[suggested & truly_noisy]] ==
                    category[suggested & truly_noisy])) if (suggested & truly_noisy).any()
        else float("nan"),
    }


def boilerplate_landing(scored: Path) -> dict[str, float]:
    """Where correct (not injected-noisy) boilerplate pairs land, as shares per partition."""
    table = pq.read_table(scored, columns=["caption", "partition", "noisy_gt"]).to_pydict()
    mask = is_boilerplate(table["caption"]) & ~np.array(table["noisy_gt"], dtype=bool)
    partition = np.array(table["partition"], dtype=object)[mask]
    out = {"correct_boilerplate_pairs": int(mask.sum())}
    for name in ("clean_significant", "clean_insignificant", "vague", "noisy", "invalid"):
        out[name] = float(np.mean(partition == name)) if mask.any() else float("nan")
    return out
