"""Build an icon corpus from an npm icon package: each SVG rasterised, captioned by its name.

Two packages, two corpora of another kind than clip art (held-out corpora for the default's
rules, ``benchmarks/results/rules.md``):

- ``mdi``: Material Design Icons (``npm pack @mdi/svg``, 7.4.47): ``svg/<name>.svg`` and
  ``meta.json``. Caption: the icon's name as its author wrote it, dashes read as spaces
  ("book arrow up outline"); every name is unique, so no caption repeats. ``category``: the
  first of its tags ("Developer / Languages"), empty for most.
- ``tabler``: Tabler Icons (``npm pack @tabler/icons``, 3.x): ``icons/outline/<name>.svg`` and
  ``icons/filled/<name>.svg``, ``icons.json``. Caption: the name read the same way, then its
  authors' search tags not already in the name ("arrow big down: direction, south"); an icon
  drawn in both styles carries one caption for two pictures, as the package names it.
  ``category``: its category.

Images: ``rsvg-convert`` (Debian ``librsvg2-bin``) at 128 x 128 px on white, PNG bytes, as clip
art's. Not a project dependency; the corpus is built once and never committed.

    apt-get install librsvg2-bin
    mkdir -p /work/corpora/src && cd /work/corpora/src && npm pack @mdi/svg @tabler/icons
    (unpack each .tgz into src/mdi-svg and src/tabler)
    python benchmarks/corpus_icons.py mdi /work/corpora/src/mdi-svg -o /work/corpora/mdi/mdi.parquet
    python benchmarks/corpus_icons.py tabler /work/corpora/src/tabler/package \
        -o /work/corpora/tabler/tabler.parquet
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SIZE = 128


def words(name: str) -> str:
    """An icon's file name as words: ``"book-arrow-up"`` -> ``"book arrow up"``."""
    return " ".join(part for part in name.replace("_", "-").split("-") if part)


def mdi_icons(root: Path) -> Iterator[dict]:
    """Material Design Icons: one row per icon in ``meta.json`` with an SVG on disk."""
    for icon in json.loads((root / "meta.json").read_text()):
        svg = root / "svg" / f"{icon['name']}.svg"
        if svg.exists() and not icon.get("deprecated"):
            yield {"id": f"mdi/{icon['name']}", "svg": svg, "caption": words(icon["name"]),
                   "category": (icon.get("tags") or [""])[0]}


def tabler_icons(root: Path) -> Iterator[dict]:
    """Tabler Icons: one row per icon and style (outline, filled) in ``icons.json``."""
    for name, icon in json.loads((root / "icons.json").read_text()).items():
        named = set(words(name).split())
        extra = []
        for tag in icon.get("tags") or []:
            tag = words(str(tag))
            if tag and not set(tag.split()) <= named and tag not in extra:
                extra.append(tag)
        caption = words(name) + (": " + ", ".join(extra) if extra else "")
        for style in icon.get("styles") or {}:
            svg = root / "icons" / style / f"{name}.svg"
            if svg.exists():
                yield {"id": f"tabler/{style}/{name}", "svg": svg, "caption": caption,
                       "category": icon.get("category") or ""}


SOURCES = {"mdi": mdi_icons, "tabler": tabler_icons}


def rasterise(svg: Path) -> bytes:
    """The SVG drawn at :data:`SIZE` px square on white, as PNG bytes."""
    return subprocess.run(["rsvg-convert", "-w", str(SIZE), "-h", str(SIZE), "-b", "white",
                           "-f", "png", str(svg)], check=True, capture_output=True).stdout


def build(source: str, root: Path, out: Path, workers: int = 2) -> int:
    """Write the corpus of ``source`` found under ``root`` to ``out``; the number of pairs."""
    rows = list(SOURCES[source](root))
    with ThreadPoolExecutor(workers) as pool:
        images = list(pool.map(rasterise, (row["svg"] for row in rows)))
    table = pa.table({"id": [row["id"] for row in rows], "image": images,
                      "caption": [row["caption"] for row in rows],
                      "category": [row["category"] for row in rows]})
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", choices=sorted(SOURCES))
    parser.add_argument("root", type=Path, help="the unpacked npm package")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    print(f"{build(args.source, args.root, args.out)} pairs -> {args.out}")


if __name__ == "__main__":
    main()
