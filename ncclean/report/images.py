"""The images of a scored file's sampled rows, for the report and the labelling sheet.

A row's image is the bytes in its image column, a path there (relative to the folder of the
input Parquet file the row was read from), or, for a corpus read from webdataset tars (whose
bytes the output does not copy), the ``TAR::MEMBER`` reference in its ``image_ref`` column,
with the tar named as the scoring run was given its input. Both are resolved against the input
that the run record names (:func:`located_input`), not the output's folder or the current one,
so the images show wherever the output was written and wherever the page is made from. A file
without a record, or whose input is no longer where the record says, resolves paths against its
own folder.

Only the sampled rows' images are read: a tar's headers are scanned once for the members the
sample names (no member's bytes but those), and each image is read when its thumbnail is made.
"""

from __future__ import annotations

import base64
import bisect
import io
import tarfile
import zlib
from pathlib import Path, PurePath

from PIL import Image

from ncclean.data.images import RowProblem, leaves_folder, load_image_bytes, stable_reason
from ncclean.data.scored import Scored
from ncclean.data.webdataset import IMAGE_REF
from ncclean.errors import NcCleanError

_TAR_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error)


def thumbnail(data: bytes, size: int) -> str | None:
    """A JPEG data URI of the image scaled to fit ``size`` (transparency on white); ``None``
    when the bytes do not decode."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (size, size))
            image.thumbnail((size, size))
            if image.mode in ("RGBA", "LA", "PA", "P"):
                image = image.convert("RGBA")
                flat = Image.new("RGB", image.size, (255, 255, 255))
                flat.paste(image, mask=image.getchannel("A"))
                image = flat
            buffer = io.BytesIO()
            image.convert("RGB").save(buffer, "JPEG", quality=80)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_columns(image_col: str | None) -> list[str]:
    """The columns to fetch for a row's image: ``image_col`` and the webdataset reference."""
    return list(dict.fromkeys(c for c in (image_col, IMAGE_REF) if c))


def located_input(scored: Scored) -> Path | None:
    """Where the input the run record names is now: the path itself when absolute; a relative
    one (relative to where ``score`` ran) under the nearest folder above the output that holds
    it, else under the current folder. ``None`` when there is no record or nothing is there."""
    given = scored.sidecar.get("input")
    if not isinstance(given, str) or not given:
        return None
    path = Path(given)
    if path.is_absolute():
        return path if path.exists() else None
    for folder in (*scored.source.path.absolute().parents, Path.cwd()):
        if (folder / path).exists():
            return folder / path
    return None


class SampledImages:
    """The images of ``values`` (row -> fetched columns, :func:`image_columns` among them) of
    ``scored``; :meth:`read` gives one row's encoded image."""

    def __init__(self, scored: Scored, values: dict[int, dict], image_col: str | None):
        columns = (scored.sidecar.get("options") or {}).get("columns") or {}
        self.scored = scored
        self.allow = bool(columns.get("allow_absolute_paths"))
        self.given = scored.sidecar.get("input")
        self.input = located_input(scored)
        self._values: dict[int, bytes | str | None] = {}
        self._wanted: dict[Path, set[str]] = {}
        self._members: dict[Path, dict[str, tarfile.TarInfo] | RowProblem] = {}
        self._starts: tuple[list[int], list[Path]] | None = None
        for row, fetched in values.items():
            value = image_value(fetched.get(image_col)) if image_col else None
            value = fetched.get(IMAGE_REF) if value is None else value
            self._values[row] = value
            ref = self._reference(value)
            if isinstance(ref, tuple):
                self._wanted.setdefault(ref[0], set()).add(ref[1])

    def read(self, row: int) -> bytes:
        """The encoded image of ``row``; :class:`RowProblem` when there is none to be read."""
        value = self._values.get(row)
        ref = self._reference(value)
        if isinstance(ref, RowProblem):
            raise ref
        if ref is not None:
            return self._member(*ref)
        return load_image_bytes(value, self._folder_of(row), allow_absolute_paths=self.allow)

    def thumbnail(self, row: int, size: int) -> str | None:
        """:func:`thumbnail` of ``row``'s image; ``None`` when there is none (the page says so)."""
        try:
            return thumbnail(self.read(row), size)
        except RowProblem:
            return None

    def _reference(self, value) -> tuple[Path, str] | RowProblem | None:
        """The tar and member a ``TAR::MEMBER`` value names, ``None`` for any other value."""
        if not isinstance(value, str) or "::" not in value:
            return None
        tar, _, member = value.partition("::")
        if not tar.endswith(".tar") or not member:
            return None
        written, given = PurePath(tar), PurePath(self.given or "")
        if self.input is not None and written == given:
            return self.input, member
        if self.input is not None and given in written.parents:
            return self.input / written.relative_to(given), member
        if self.input is None and not leaves_folder(tar):  # no record: beside the output
            return self._own_folder() / tar, member
        if self.allow:
            return Path(tar), member
        return RowProblem(f"image reference outside the input: {value}")

    def _member(self, tar: Path, name: str) -> bytes:
        if tar not in self._members:
            self._members[tar] = _scan(tar, self._wanted.get(tar, {name}))
        found = self._members[tar]
        if isinstance(found, RowProblem):
            raise found
        if name not in found:
            raise RowProblem(f"missing image: no member {name} in {tar.name}")
        try:
            with tarfile.open(tar) as archive:
                return archive.extractfile(found[name]).read()
        except _TAR_ERRORS as error:
            raise RowProblem(stable_reason(f"unreadable tar {tar.name}", error)) from None

    def _own_folder(self) -> Path:
        path = self.scored.source.path
        return path if path.is_dir() else path.parent

    def _folder_of(self, row: int) -> Path:
        """The folder a path in ``row``'s image column is relative to: that of the input shard
        the row was read from (the output folder mirrors the input's; one output file holds
        the input's shards in order), else the input's, else the output's own."""
        if self.input is None:
            return self._own_folder()
        if not self.input.is_dir():
            return self.input.parent
        source = self.scored.source
        if source.path.is_dir():
            firsts = [shard.first_row for shard in source.shards]
            shard = source.shards[bisect.bisect_right(firsts, row) - 1]
            return self.input / shard.path.relative_to(source.path).parent
        if self._starts is None:
            self._starts = _input_starts(self.input, source.n_rows)
        starts, folders = self._starts
        return folders[bisect.bisect_right(starts, row) - 1] if folders else self.input


def image_value(value):
    """A cell of an image column as bytes, a path or ``None`` (the Hugging Face ``{bytes,
    path}`` struct unpacked)."""
    if isinstance(value, dict):
        return value.get("bytes") or value.get("path")
    return value


def _scan(tar: Path, names: set[str]) -> dict[str, tarfile.TarInfo] | RowProblem:
    """The headers of the members ``names`` of ``tar`` (a plain tar's data is skipped, not
    read), or the reason none can be read."""
    found: dict[str, tarfile.TarInfo] = {}
    try:
        with tarfile.open(tar) as archive:
            for member in archive:
                if member.name in names and member.isfile():
                    found[member.name] = member
                    if len(found) == len(names):
                        break
    except FileNotFoundError:
        return RowProblem(f"missing image: no file {tar}")
    except _TAR_ERRORS as error:
        return RowProblem(stable_reason(f"unreadable tar {tar.name}", error))
    return found


def _input_starts(folder: Path, n_rows: int) -> tuple[list[int], list[Path]]:
    """The first row and folder of each Parquet shard of the input ``folder`` when they hold
    ``n_rows`` rows in all (footers only), else no shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ncclean.data.shards import list_shards

    starts, folders, total = [], [], 0
    try:
        for shard in list_shards(folder):
            if shard.kind != "parquet":
                return [], []
            starts.append(total)
            folders.append(shard.path.parent)
            total += pq.ParquetFile(shard.path).metadata.num_rows
    except (NcCleanError, OSError, pa.ArrowException):
        return [], []
    return (starts, folders) if total == n_rows else ([], [])
