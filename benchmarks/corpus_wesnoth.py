"""A multilingual image-caption corpus from Battle for Wesnoth's unit types.

    python benchmarks/corpus_wesnoth.py [--root /usr/share/games/wesnoth/1.16 ...]
                                        [--out /work/corpora/wesnoth] [--langs en zh_CN de ja ar]

Wesnoth (GPL-2.0+, Debian ``wesnoth-1.16-data`` and the campaign packages
``wesnoth-1.16-<campaign>``) defines each unit type in WML: an ``id``, a translatable ``name``,
a translatable ``description`` written by the game's authors (a few sentences on what the unit
is, looks like and does) and the base sprite ``image``. The translations are the project's own,
in ``locale/<lang>/LC_MESSAGES/<textdomain>.mo``, read with the standard library's ``gettext``.

One pair per unit type that has a description and a sprite: the image is the sprite (72 px,
transparent) composited on white and upscaled to 144 px with nearest-neighbour (pixel art stays
sharp); the caption is ``"<name>. <description>"`` in one language. A unit enters every language's
file only when all the requested languages translate both its name and its description, so the
files hold the same ids in the same order and differ only in the caption (an untranslated string
would otherwise leave English text in, say, the Arabic file). Units that share one description
(a female or variant line) keep the first. ``category`` is the unit's race; ``source`` is ``core``
or the campaign's text domain.

Writes ``<out>/wesnoth-<lang>.parquet`` (columns ``id``, ``image`` PNG bytes, ``caption``,
``category``, ``view`` (``sprite`` or ``portrait``), ``source``, and ``name``: the translated
name alone, a short caption) and prints one JSON line of counts.
"""

from __future__ import annotations

import argparse
import gettext
import io
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

ROOTS = (Path("/usr/share/games/wesnoth/1.16"),
         Path("/work/corpora/src/root/usr/share/games/wesnoth/1.16"))
LANGS = ("en", "zh_CN", "de", "ja", "ru")
#: Arabic translates the units' names but hardly any description: it has the names corpus only.
NAME_LANGS = ("en", "zh_CN", "de", "ja", "ru", "ar")
SIZE = 144
TAGS = ("unit_type", "object")
_KEY = re.compile(r'^\s*(\w+)\s*=\s*(_\s*)?"', re.M)
_MARKUP = re.compile(r"</?\w+>")
_PLAIN = re.compile(r'^\s*(\w+)\s*=\s*([^"\n#]*?)\s*$')


def wml_string(text: str, start: int) -> tuple[str, int]:
    """The quoted WML string opening at ``text[start] == '"'`` (``""`` escapes a quote)."""
    out, i = [], start + 1
    while i < len(text):
        if text[i] == '"':
            if text[i + 1:i + 2] == '"':
                out.append('"')
                i += 2
                continue
            return "".join(out), i + 1
        out.append(text[i])
        i += 1
    return "".join(out), i


def unit_types(path: Path) -> list[dict]:
    """The top-level keys of each ``[unit_type]`` in one .cfg file, with its text domain."""
    text = path.read_text(encoding="utf-8", errors="replace")
    units, depth, unit, domain, i = [], 0, None, None, 0
    lines = text.split("\n")
    offset = 0
    for line in lines:
        start, offset = offset, offset + len(line) + 1
        if start < i:
            continue
        stripped = line.strip()
        if stripped.startswith("#textdomain"):
            domain = stripped.split()[1]
            continue
        if stripped.startswith("#") or not stripped:
            continue
        tag = re.match(r"^\[(/?)(\+?[\w]+)\]", stripped)
        if tag:
            closing, name = tag.group(1) == "/", tag.group(2)
            if unit is None and not closing and name in TAGS:
                unit, depth = {"domain": domain, "file": str(path), "tag": name}, 1
            elif unit is not None:
                depth += -1 if closing else 1
                if depth == 0:
                    units.append(unit)
                    unit = None
            continue
        if unit is None or depth != 1:
            continue
        key = _KEY.match(line)
        if key:
            value, i = wml_string(text, start + key.end() - 1)
            unit.setdefault(key.group(1), value)
            continue
        plain = _PLAIN.match(line)
        if plain:
            unit.setdefault(plain.group(1), plain.group(2))
    return units


def find_image(ref: str, roots: list[Path]) -> Path | None:
    """The sprite file an ``image=`` value names (image path functions such as ``~RC`` dropped)."""
    ref = ref.split("~")[0].split(":")[0].strip()
    for root in roots:
        hit = root / ref
        if hit.is_file():
            return hit
    return None


def sprite_png(path: Path) -> bytes:
    """The sprite or portrait on white, ``SIZE`` px square, as PNG bytes (sprites upscaled with
    nearest-neighbour, portraits downscaled with Lanczos)."""
    sprite = Image.open(path).convert("RGBA")
    canvas = Image.new("RGBA", sprite.size, (255, 255, 255, 255))
    canvas.alpha_composite(sprite)
    side = max(canvas.size)
    square = Image.new("RGB", (side, side), (255, 255, 255))
    square.paste(canvas.convert("RGB"), ((side - canvas.width) // 2, (side - canvas.height) // 2))
    out = io.BytesIO()
    resample = Image.NEAREST if side < SIZE else Image.LANCZOS
    square.resize((SIZE, SIZE), resample).save(out, format="PNG")
    return out.getvalue()


def catalogs(roots: list[Path], lang: str) -> dict[str, gettext.GNUTranslations]:
    """Every text domain's translations for ``lang`` found under the roots."""
    found = {}
    for root in roots:
        for mo in sorted((root / "locale" / lang / "LC_MESSAGES").glob("*.mo")):
            with open(mo, "rb") as handle:
                found[mo.stem] = gettext.GNUTranslations(handle)
    return found


def collect(roots: list[Path]) -> list[dict]:
    """Every unit type with a name, a description and a sprite, first of each description."""
    units, seen = [], set()
    for root in roots:
        files = sorted((root / "data").rglob("*.cfg"))
        for path in files:
            for unit in unit_types(path):
                desc, name = unit.get("description", "").strip(), unit.get("name", "").strip()
                if not desc or not name or len(desc) < 20 or desc in seen or "{" in desc:
                    continue
                image_roots = [root / "data" / "core" / "images"]
                campaign = re.search(r"data/campaigns/[^/]+", str(path))
                if campaign:
                    image_roots.insert(0, root / campaign.group(0) / "images")
                image = find_image(unit.get("image", ""), image_roots + [
                    r / "data" / "core" / "images" for r in roots])
                if image is None:
                    continue
                seen.add(desc)
                profile = find_image(unit.get("profile", ""), image_roots + [
                    r / "data" / "core" / "images" for r in roots])
                key = unit.get("id", "") if unit["tag"] == "unit_type" else ""
                units.append({"id": key if key and "{" not in key else name,
                              "name": name, "description": desc,
                              "profile": profile,
                              "race": unit.get("race") or
                              ("item" if unit["tag"] == "object" else "none"), "image": image,
                              "domain": unit["domain"] or "wesnoth-units",
                              "source": campaign.group(0).split("/")[-1] if campaign else "core"})
    return units


def translated(units: list[dict], roots: list[Path], langs: tuple[str, ...],
               names_only: bool = False) -> dict:
    """The kept units (every language translates their name, and their description unless
    ``names_only``) and ``{lang: [caption per kept unit]}``, ``{lang: [name per kept unit]}``."""
    tables = {lang: catalogs(roots, lang) for lang in langs if lang != "en"}
    fields = ("name",) if names_only else ("name", "description")
    kept, captions, names = [], {lang: [] for lang in langs}, {lang: [] for lang in langs}
    for unit in units:
        texts = {}
        for lang in langs:
            if lang == "en":  # a msgid may carry a context, "female^Elvish Druid"
                texts[lang] = tuple(unit[f].split("^", 1)[-1] for f in fields)
                continue
            table = tables[lang].get(unit["domain"])
            found = tuple(table._catalog.get(unit[f]) if table else None for f in fields)
            if None in found or not all(p.strip() for p in found):
                break
            texts[lang] = found
        else:
            kept.append(unit)
            for lang in langs:
                name, desc = texts[lang][0], texts[lang][-1]
                sep = "" if name.endswith(("。", ".", "؟")) else ("。" if lang in ("zh_CN", "ja")
                                                                    else ". ")
                captions[lang].append(name if names_only else
                                      _MARKUP.sub("", f"{name}{sep}{desc}"))
                names[lang].append(name)
    return {"units": kept, "captions": captions, "names": names}


def write(built: dict, langs: list[str], out: Path, prefix: str, portraits: bool) -> dict:
    """``<out>/<prefix>-<lang>.parquet`` for each language: one row per kept unit's sprite and,
    with ``portraits``, one per portrait not already used by an earlier unit."""
    rows, used = [], set()
    for k, unit in enumerate(built["units"]):
        rows.append((k, "sprite", unit["image"]))
        if portraits and unit["profile"] and unit["profile"] not in used:
            used.add(unit["profile"])
            rows.append((k, "portrait", unit["profile"]))
    kept = [built["units"][k] for k, _, _ in rows]
    out.mkdir(parents=True, exist_ok=True)
    ids = [f"{u['source']}:{u['id']}:{view}" for u, (_, view, _) in zip(kept, rows)]
    ids = [f"{i}#{ids[:n].count(i)}" if ids.count(i) > 1 else i for n, i in enumerate(ids)]
    columns = {"id": ids,
               "image": pa.array([sprite_png(path) for _, _, path in rows], pa.binary()),
               "category": [u["race"] for u in kept], "view": [view for _, view, _ in rows],
               "source": [u["source"] for u in kept]}
    for lang in langs:
        captions = [built["captions"][lang][k] for k, _, _ in rows]
        names = [built["names"][lang][k] for k, _, _ in rows]
        pq.write_table(pa.table({**columns, "caption": captions, "name": names}),
                       out / f"{prefix}-{lang}.parquet")
    return {"units": len(built["units"]), "pairs": len(rows), "portraits": len(used),
            "languages": langs, "files": str(out / f"{prefix}-<lang>.parquet"),
            "races": len({u["race"] for u in kept})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, nargs="+", default=list(ROOTS))
    parser.add_argument("--out", type=Path, default=Path("/work/corpora/wesnoth"))
    parser.add_argument("--langs", nargs="+", default=list(LANGS))
    parser.add_argument("--name-langs", nargs="+", default=list(NAME_LANGS))
    parser.add_argument("--no-portraits", dest="portraits", action="store_false",
                        help="sprites only (one pair per unit)")
    args = parser.parse_args(argv)
    roots = [r for r in args.root if r.is_dir()]
    units = collect(roots)
    print(json.dumps({"units_described": len(units)}))
    for prefix, langs, names_only in (("wesnoth", args.langs, False),
                                      ("wesnoth-names", args.name_langs, True)):
        built = translated(units, roots, tuple(langs), names_only)
        print(json.dumps(write(built, langs, args.out, prefix, args.portraits)))


if __name__ == "__main__":
    main()
