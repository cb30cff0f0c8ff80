"""Issue 37's pseudo-caption measure: how many noisy pairs get a suggestion, and whether the
suggestions come from the image's own kind of picture.

For a scored clip-art file (its rows keep the corpus's ``category`` column, which stays with the
image when noise is injected with ``--move-with-image category``), prints one JSON line per
file:

- ``suggested``: the share of ``noisy`` pairs with a ``pseudo_caption`` (the bar: 80%);
- ``own_category``: among those, the share whose suggested caption was written for an image of
  the same top-level category as the noisy pair's image (``computer/icons/...`` -> ``computer``;
  where the file says which image was whose, the caption's own image, not the image its row
  holds after the noise);
- ``random_clean``: the same share for a clean caption drawn at random (seeded) for each of
  them, and ``ratio`` = own_category / random_clean (the bar: at least 2);
- ``distinct`` suggestions and ``most_uses``: how many noisy pairs the most suggested caption
  was offered to (``most_uses_share`` of the suggestions; issue 63's bar: at most max(2, 5%)
  on the 300-pair example, 1% on clip art);
- ``own_caption``: where the file says which image was whose (``image_id`` and
  ``original_image_id``, as ``inject-noise`` writes them), the share of suggestions that are a
  caption the image had before the noise was injected.

    python benchmarks/pseudo_captions.py scored.parquet [more scored files ...]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow.parquet as pq

CLEAN = ("clean_significant", "clean_insignificant")


def top_level(categories: list) -> np.ndarray:
    return np.array([(c or "").split("/")[0] for c in categories], dtype=object)


def pseudo_caption_metrics(path: str, seed: int = 0) -> dict:
    names = pq.read_schema(path).names
    wanted = ["id", "category", "partition", "pseudo_caption_id"] + [
        c for c in ("pseudo_caption", "caption") if c in names]
    truth = [c for c in ("image_id", "original_image_id") if c in names]
    table = pq.read_table(path, columns=wanted + truth)
    ids = table.column("id").to_pylist()
    where = {pair_id: row for row, pair_id in enumerate(ids)}
    category = top_level(table.column("category").to_pylist())
    part = np.array(table.column("partition").to_pylist(), dtype=object)
    donor_ids = table.column("pseudo_caption_id").to_pylist()
    noisy = np.flatnonzero(part == "noisy")
    suggested = np.array([k for k in noisy if donor_ids[k] is not None], dtype=np.int64)
    donors = np.array([where[donor_ids[k]] for k in suggested], dtype=np.int64)
    clean = np.flatnonzero(np.isin(part, CLEAN))
    drawn = np.random.default_rng(seed).choice(clean, size=len(suggested)) \
        if len(clean) and len(suggested) else np.zeros(0, dtype=np.int64)
    caption_category = category  # the category of the image each row's caption was written for
    if len(truth) == 2:  # a moved caption's own image now sits in another row, with its category
        image_category = dict(zip(table.column("image_id").to_pylist(), category))
        caption_category = np.array([image_category.get(i, c) for i, c in zip(
            table.column("original_image_id").to_pylist(), category)], dtype=object)
    own = float(np.mean(caption_category[donors] == category[suggested])) \
        if len(suggested) else None
    random = float(np.mean(caption_category[drawn] == category[suggested])) \
        if len(suggested) else None
    texts = table.column("pseudo_caption").to_pylist() if "pseudo_caption" in names else donor_ids
    offered = [texts[k] for k in suggested]
    _, uses = np.unique(np.array(offered, dtype=object), return_counts=True) \
        if offered else (None, np.zeros(1, dtype=np.int64))
    own_caption = None
    if len(truth) == 2 and len(suggested) and "caption" in names:
        captions = table.column("caption").to_pylist()
        true: dict = {}
        for caption, original in zip(captions, table.column("original_image_id").to_pylist(),
                                     strict=True):
            true.setdefault(original, set()).add(caption)
        image = table.column("image_id").to_pylist()
        own_caption = float(np.mean([texts[k] in true.get(image[k], set())
                                     for k in suggested]))
    return {"file": path, "noisy": int(len(noisy)), "with_suggestion": int(len(suggested)),
            "distinct": int(len(set(offered))), "most_uses": int(uses.max()),
            "most_uses_share": float(uses.max() / len(offered)) if offered else None,
            "own_caption": own_caption,
            "suggested": len(suggested) / len(noisy) if len(noisy) else None,
            "own_category": own, "random_clean": random,
            "ratio": own / random if own is not None and random else None}


if __name__ == "__main__":
    for scored in sys.argv[1:]:
        print(json.dumps(pseudo_caption_metrics(scored)))
