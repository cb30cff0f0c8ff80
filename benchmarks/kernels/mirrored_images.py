"""The default on embedded corpora with each image's vector averaged with its mirror image's.

    python benchmarks/kernels/mirrored_images.py SRC:SEED:RATIO:MOVE ... [--work W]

Each ``SRC`` is an embedded corpus (``ncclean embed``: ``image``, ``image_emb``, ``text_emb``);
``RATIO`` of its captions are moved (``inject-noise --seed SEED --move-with-image MOVE``, MOVE
a comma-separated list, maybe empty; ``RATIO`` 0 scores the corpus as it is). Both arms are
scored by the default with seed 0: ``image_emb`` as embedded, and the mean of it and the ImageNet
tower's vector of the image flipped left to right. One JSON line per corpus: AUROC of each arm
where the corpus has ``noisy_gt``; the scored files stay in ``W`` (``o-<stem>-<arm>.parquet``)
for ``benchmarks/natural_noise.py``. Internals: the tower itself (``ncclean.models.imagenet``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncclean import api
from ncclean.data.images import DEFAULT_MAX_PIXELS
from ncclean.models.imagenet import imagenet_encoder


def mirrored(images: list[bytes], cache: dict) -> np.ndarray:
    """The tower's vectors of ``images`` flipped left to right, each distinct image once."""
    encoder = imagenet_encoder()
    keys = [hashlib.sha1(data).hexdigest() for data in images]
    todo = [(k, data) for k, data in dict(zip(keys, images)).items() if k not in cache]
    if todo:
        flipped = [encoder.prepare(data, DEFAULT_MAX_PIXELS)[:, ::-1].copy() for _, data in todo]
        for (key, _), vector in zip(todo, encoder.images(flipped)):
            cache[key] = vector
    return np.stack([cache[k] for k in keys])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="SRC:SEED:RATIO:MOVE")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ncclean-mirrored-"))
    cache: dict = {}
    for spec in args.specs:
        source, seed, ratio, move = spec.rsplit(":", 3)
        noisy = Path(source)
        if float(ratio) > 0:
            noisy = work / f"{Path(source).stem}-{ratio}-s{seed}.parquet"
            api.inject_noise(source, noisy, ratio=float(ratio), seed=int(seed),
                             image_emb_col="image_emb", overwrite=True, progress=False,
                             move_with_image=[m for m in move.split(",") if m])
        table = pq.read_table(noisy)
        vectors = np.stack(table.column("image_emb").to_numpy(zero_copy_only=False))
        valid = np.flatnonzero(np.abs(vectors).sum(1) > 0)
        images = table.column("image").to_pylist()
        mean = vectors.astype(np.float32)
        mean[valid] = (mean[valid] + mirrored([images[i] for i in valid], cache)) / 2
        arm = work / f"{noisy.stem}-mirrored.parquet"
        pq.write_table(table.set_column(
            table.schema.get_field_index("image_emb"), "image_emb",
            pa.FixedSizeListArray.from_arrays(pa.array(mean.ravel()), mean.shape[1])), arm)
        row = {"corpus": noisy.name}
        for name, path in (("default", noisy), ("mirrored", arm)):
            summary = api.score(path, work / f"o-{noisy.stem}-{name}.parquet", seed=0,
                                cache_dir=False, image_emb_col="image_emb",
                                text_emb_col="text_emb", overwrite=True, progress=False)
            row[name] = round(float(summary.detection["auroc"]), 4) if summary.detection \
                else None
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
