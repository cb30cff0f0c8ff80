"""A synthetic corpus with ground truth: 64 px pictures of coloured shapes, captions that say
what is where.

Each image holds one to three shapes (circle, square, triangle, diamond) in six colours and two
sizes, each in its own cell of a 3x3 grid. Captions are generated from the scene with several
paraphrase templates in English or Chinese (``mixed``: either, or English with Chinese nouns), so
every caption of an image is true of it and a tokeniser meets both scripts. It is the corpus every
test and demo can generate in a second.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw

from ncclean.errors import BadOptionError

Lang = Literal["en", "zh", "mixed"]
LANGS: tuple[str, ...] = ("en", "zh", "mixed")
IMAGE_SIZE = 64

SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220),
    "yellow": (235, 200, 30), "purple": (140, 60, 180), "orange": (245, 130, 30),
}
SIZES = ("small", "large")
POSITIONS = ("top left", "top", "top right", "left", "centre", "right",
             "bottom left", "bottom", "bottom right")

EN_POSITION = {
    "top left": ("in the top left", "in the upper left corner", "at the top left"),
    "top": ("at the top", "in the upper middle", "along the top"),
    "top right": ("in the top right", "in the upper right corner", "at the top right"),
    "left": ("on the left", "at the left side", "in the middle left"),
    "centre": ("in the centre", "in the middle", "at the center"),
    "right": ("on the right", "at the right side", "in the middle right"),
    "bottom left": ("in the bottom left", "in the lower left corner", "at the bottom left"),
    "bottom": ("at the bottom", "in the lower middle", "along the bottom"),
    "bottom right": ("in the bottom right", "in the lower right corner", "at the bottom right"),
}
ZH_COLOUR = {"red": "红色", "green": "绿色", "blue": "蓝色", "yellow": "黄色", "purple": "紫色",
             "orange": "橙色"}
ZH_SHAPE = {"circle": "圆形", "square": "正方形", "triangle": "三角形", "diamond": "菱形"}
ZH_SIZE = {"small": "小", "large": "大"}
ZH_POSITION = {"top left": "左上角", "top": "上方", "top right": "右上角", "left": "左边",
               "centre": "中间", "right": "右边", "bottom left": "左下角", "bottom": "下方",
               "bottom right": "右下角"}


@dataclass(frozen=True)
class Shape:
    shape: str
    colour: str
    size: str
    position: str
    x: int
    y: int


def random_scene(rng: np.random.Generator) -> list[Shape]:
    """One to three shapes, each in its own grid cell, with a little jitter."""
    n_shapes = int(rng.integers(1, 4))
    cells = rng.choice(len(POSITIONS), size=n_shapes, replace=False)
    shapes = []
    for cell in sorted(int(c) for c in cells):
        row, col = divmod(cell, 3)
        shapes.append(Shape(
            shape=SHAPES[rng.integers(len(SHAPES))],
            colour=list(COLOURS)[rng.integers(len(COLOURS))],
            size=SIZES[rng.integers(len(SIZES))],
            position=POSITIONS[cell],
            x=int(11 + 21 * col + rng.integers(-2, 3)),
            y=int(11 + 21 * row + rng.integers(-2, 3)),
        ))
    return shapes


def render(shapes: list[Shape]) -> bytes:
    """PNG bytes of the scene on a white ``IMAGE_SIZE`` square."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for s in shapes:
        r = 9 if s.size == "large" else 5
        fill = COLOURS[s.colour]
        if s.shape == "circle":
            draw.ellipse((s.x - r, s.y - r, s.x + r, s.y + r), fill=fill)
        elif s.shape == "square":
            draw.rectangle((s.x - r, s.y - r, s.x + r, s.y + r), fill=fill)
        elif s.shape == "triangle":
            draw.polygon([(s.x, s.y - r), (s.x - r, s.y + r), (s.x + r, s.y + r)], fill=fill)
        else:
            diamond = [(s.x, s.y - r), (s.x + r, s.y), (s.x, s.y + r), (s.x - r, s.y)]
            draw.polygon(diamond, fill=fill)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _shuffled(shapes: list[Shape], rng: np.random.Generator) -> list[Shape]:
    return [shapes[i] for i in rng.permutation(len(shapes))]


def _en_phrase(s: Shape, rng: np.random.Generator, zh_nouns: bool = False) -> str:
    noun = ZH_SHAPE[s.shape] if zh_nouns else s.shape
    colour = ZH_COLOUR[s.colour] if zh_nouns else s.colour
    position = EN_POSITION[s.position][rng.integers(3)]
    form = rng.integers(3)
    if form == 0:
        return f"a {s.size} {colour} {noun} {position}"
    if form == 1:
        return f"a {colour} {noun} {position}"
    return f"{position} a {s.size} {colour} {noun}"


def _en_caption(shapes: list[Shape], rng: np.random.Generator, zh_nouns: bool = False) -> str:
    phrases = [_en_phrase(s, rng, zh_nouns) for s in _shuffled(shapes, rng)]
    joined = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    frame = rng.integers(4)
    if frame == 0:
        return joined
    if frame == 1:
        return f"there is {joined}"
    if frame == 2:
        return f"a picture of {joined}"
    count = ("one shape", "two shapes", "three shapes")[len(shapes) - 1]
    return f"{count}: {joined}"


def _zh_caption(shapes: list[Shape], rng: np.random.Generator) -> str:
    phrases = []
    for s in _shuffled(shapes, rng):
        colour, noun = ZH_COLOUR[s.colour], ZH_SHAPE[s.shape]
        size, where = ZH_SIZE[s.size], ZH_POSITION[s.position]
        form = rng.integers(3)
        if form == 0:
            phrases.append(f"{where}有一个{size}的{colour}{noun}")
        elif form == 1:
            phrases.append(f"一个{colour}的{noun}在{where}")
        else:
            phrases.append(f"{where}是{colour}{noun}")
    frame = rng.integers(3)
    joined = "，".join(phrases)
    return joined if frame == 0 else (f"图中{joined}" if frame == 1 else f"这张图片里{joined}")


def caption(shapes: list[Shape], lang: Lang, rng: np.random.Generator) -> str:
    """One caption of the scene in ``lang``."""
    if lang == "en":
        return _en_caption(shapes, rng)
    if lang == "zh":
        return _zh_caption(shapes, rng)
    pick = rng.integers(3)
    if pick == 0:
        return _en_caption(shapes, rng)
    if pick == 1:
        return _zh_caption(shapes, rng)
    return _en_caption(shapes, rng, zh_nouns=True)


def scene_json(shapes: list[Shape]) -> str:
    return json.dumps({"shapes": [s.__dict__ for s in shapes]}, sort_keys=True)


def synth_table(n_images: int = 500, captions_per_image: int = 5, lang: Lang = "en",
                seed: int = 0) -> pa.Table:
    """The corpus as a table with columns ``id, image_id, image, caption, scene``; one row per
    caption, the captions of an image next to each other. The same arguments give the same bytes.
    """
    if n_images < 1 or captions_per_image < 1:
        raise BadOptionError("--n-images and --captions-per-image must be at least 1")
    if lang not in LANGS:
        raise BadOptionError(f"unknown language {lang!r}; choose one of {', '.join(LANGS)}")
    rng = np.random.default_rng(seed)
    image_ids, images, captions, scenes = [], [], [], []
    for image_id in range(n_images):
        shapes = random_scene(rng)
        png, scene = render(shapes), scene_json(shapes)
        seen: list[str] = []
        for _ in range(8 * captions_per_image):  # prefer distinct paraphrases
            text = caption(shapes, lang, rng)
            if text not in seen:
                seen.append(text)
            if len(seen) == captions_per_image:
                break
        distinct = len(seen)
        while len(seen) < captions_per_image:  # a scene with few paraphrases repeats them
            seen.append(seen[len(seen) % distinct])
        for text in seen:
            image_ids.append(image_id)
            images.append(png)
            captions.append(text)
            scenes.append(scene)
    n = len(captions)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "image_id": pa.array(image_ids, pa.int64()),
        "image": pa.array(images, pa.binary()),
        "caption": pa.array(captions, pa.string()),
        "scene": pa.array(scenes, pa.string()),
    })
