"""An image-caption corpus of desktop applications: each program's icon and its authors' words.

Debian publishes the AppStream (DEP-11) catalogue of the programs it packages: for each one an
``ID``, a ``Name``, a one-line ``Summary`` and a ``Description`` of a paragraph or more, written
by the program's authors (upstream metainfo files), with translations, its ``Categories`` and
its icon, cached at 128 x 128 px. One pair per desktop application with a cached 128 px icon
and an English summary; the icon is composited on white (PNG bytes, as clip art's).

Two caption lengths from the same pairs, so that what a rule reads from caption length can be
told from what it reads from the corpus:

- ``appstream-summary``: ``"<Name>: <Summary>"`` ("GNU Image Manipulation Program: Create
  images and edit photographs"), one line;
- ``appstream-description``: the summary line, then the description's text (paragraphs and
  list items as plain sentences), cut to :data:`MAX_WORDS` words.

``category`` is the program's first category that is not a generic one (``GTK``, ``Qt``,
``KDE``, ``GNOME``, ``Application``). Not clip art, not synthetic, neither emoji fonts nor Tux
Paint stamps. Built once, never committed:

    curl -O http://deb.debian.org/debian/dists/bookworm/main/dep11/Components-amd64.yml.gz
    curl -O http://deb.debian.org/debian/dists/bookworm/main/dep11/icons-128x128.tar.gz
    python benchmarks/corpus_appstream.py Components-amd64.yml.gz icons-128x128.tar.gz \
        --out /work/corpora/appstream
"""

from __future__ import annotations

import argparse
import gzip
import html
import io
import json
import re
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image

SIZE = 128
MAX_WORDS = 80
GENERIC = {"GTK", "Qt", "KDE", "GNOME", "XFCE", "Application", "X-GNOME-Utilities"}


def plain(markup: str) -> str:
    """AppStream description markup (``<p>``, ``<ul><li>``, ``<em>``) as plain sentences."""
    text = re.sub(r"</(p|li)>", ". ", markup)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"\s*\.(\s*\.)+", ".", re.sub(r"([.:!?])\s*\.", r"\1", text)).strip()


def components(catalogue: Path) -> list[dict]:
    """The desktop applications of a DEP-11 ``Components-*.yml.gz`` with a cached 128 px icon
    and an English summary, in the catalogue's order, one per icon."""
    kept, icons = [], set()
    with gzip.open(catalogue, "rt", encoding="utf-8") as handle:
        for doc in yaml.load_all(handle, Loader=yaml.CSafeLoader):
            if not doc or doc.get("Type") != "desktop-application":
                continue
            cached = [i["name"] for i in (doc.get("Icon") or {}).get("cached") or []
                      if i.get("width") == SIZE]
            summary = (doc.get("Summary") or {}).get("C")
            name = (doc.get("Name") or {}).get("C")
            if not cached or not summary or not name or cached[0] in icons:
                continue
            icons.add(cached[0])
            categories = [c for c in doc.get("Categories") or [] if c not in GENERIC]
            kept.append({"id": doc["ID"], "icon": cached[0], "name": name.strip(),
                         "summary": summary.strip().rstrip("."),
                         "description": plain((doc.get("Description") or {}).get("C") or ""),
                         "category": categories[0] if categories else ""})
    return kept


def on_white(png: bytes) -> bytes:
    """An icon composited on white at :data:`SIZE` px square, as PNG bytes."""
    icon = Image.open(io.BytesIO(png)).convert("RGBA")
    if icon.size != (SIZE, SIZE):
        icon = icon.resize((SIZE, SIZE), Image.LANCZOS)
    canvas = Image.new("RGBA", icon.size, "white")
    canvas.alpha_composite(icon)
    out = io.BytesIO()
    canvas.convert("RGB").save(out, format="PNG")
    return out.getvalue()


def build(catalogue: Path, icons: Path, out: Path) -> dict:
    """Write both captions' corpora to ``out``; their counts."""
    apps = components(catalogue)
    with tarfile.open(icons) as archive:
        members = {Path(m.name).name: m for m in archive.getmembers() if m.isfile()}
        apps = [a for a in apps if a["icon"] in members]
        images = [on_white(archive.extractfile(members[a["icon"]]).read()) for a in apps]
    short = [f"{a['name']}: {a['summary']}" for a in apps]
    long = [" ".join(f"{s}. {a['description']}".split()[:MAX_WORDS]) for s, a in zip(short, apps)]
    columns = {"id": [a["id"] for a in apps], "image": pa.array(images, pa.binary()),
               "category": [a["category"] for a in apps]}
    out.mkdir(parents=True, exist_ok=True)
    for suffix, captions in (("summary", short), ("description", long)):
        pq.write_table(pa.table({**columns, "caption": captions}),
                       out / f"appstream-{suffix}.parquet")
    return {"pairs": len(apps), "distinct_summaries": len(set(short)),
            "described": sum(bool(a["description"]) for a in apps),
            "mean_words": {"summary": sum(len(c.split()) for c in short) / len(apps),
                           "description": sum(len(c.split()) for c in long) / len(apps)},
            "categories": len({a["category"] for a in apps}), "out": str(out)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalogue", type=Path, help="a DEP-11 Components-<arch>.yml.gz")
    parser.add_argument("icons", type=Path, help="its icons-128x128.tar.gz")
    parser.add_argument("--out", type=Path, default=Path("/work/corpora/appstream"))
    args = parser.parse_args(argv)
    print(json.dumps(build(args.catalogue, args.icons, args.out)))


if __name__ == "__main__":
    main()
