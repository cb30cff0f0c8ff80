"""Draw the natural-noise sample of clip art and render it as contact sheets for labelling.

The sample: 300 rows of ``clipart.parquet`` drawn without replacement by
``numpy.random.default_rng(20261123).choice(8118, 300, replace=False)``, sorted by row, then 200
more drawn the same way from the remaining rows with seed 20261124 (sample positions 300-499). Each
sheet shows 20 pairs (the image and its caption, numbered by sample position); a person looked
at every sheet and labelled each pair in ``data/natural_noise_labels.csv``.

    python benchmarks/label_sheets.py ../shared/data/clipart/clipart.parquet /tmp/sheets
"""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

DRAWS = ((20261123, 300), (20261124, 200))


def sample_rows(n_rows: int) -> np.ndarray:
    """The sample's row numbers, ``(500,)`` int64: each draw sorted, draws in order."""
    taken: list[np.ndarray] = []
    remaining = np.arange(n_rows)
    for seed, size in DRAWS:
        rows = np.sort(np.random.default_rng(seed).choice(remaining, size, replace=False))
        taken.append(rows)
        remaining = np.setdiff1d(remaining, rows)
    return np.concatenate(taken)


def main(corpus: str, out_dir: str, per_sheet: int = 20, columns: int = 5) -> None:
    from PIL import Image, ImageDraw, ImageFont

    table = pq.read_table(corpus, columns=["id", "image", "caption"])
    rows = sample_rows(table.num_rows)
    captions, images = table.column("caption").to_pylist(), table.column("image")
    font = ImageFont.load_default(size=13)
    width, height = 250, 128 + 80
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for start in range(0, len(rows), per_sheet):
        sheet = Image.new("RGB", (columns * width, (per_sheet // columns) * height), "white")
        draw = ImageDraw.Draw(sheet)
        for k, row in enumerate(rows[start:start + per_sheet]):
            x, y = (k % columns) * width, (k // columns) * height
            image = Image.open(io.BytesIO(images[int(row)].as_py())).convert("RGB")
            image.thumbnail((128, 128))
            sheet.paste(image, (x + 60, y))
            lines = textwrap.wrap(f"#{start + k} {captions[int(row)]}", 34)[:5]
            draw.text((x + 4, y + 130), "\n".join(lines), fill="black", font=font)
            draw.rectangle([x, y, x + width - 1, y + height - 1], outline=(200, 200, 200))
        sheet.save(Path(out_dir) / f"sheet{start // per_sheet:02d}.png")


if __name__ == "__main__":
    main(*sys.argv[1:3])
