"""Which input columns hold what, and the names of the columns ncclean writes.

A :class:`Columns` is what the user asked for (``--caption-col`` and friends);
:func:`resolve_columns` checks it against a Parquet schema and returns the
:class:`ResolvedColumns` actually used. Optional
columns (``id``, ``image_id``) are used when present under their default names and silently skipped
when absent; any column the user named explicitly must exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ncclean.errors import SchemaError

# Columns ncclean adds to a corpus.
INVALID_REASON = "invalid_reason"
NOISY_GT = "noisy_gt"
ORIGINAL_IMAGE_ID = "original_image_id"
IMAGE_ID = "image_id"


@dataclass(frozen=True)
class Columns:
    """Column names as requested, and how far the image column is trusted. ``None`` for
    ``id``/``image_id`` means "use the default name (``id``, ``image_id``) if the file has it";
    embedding columns are used only when named. ``allow_absolute_paths``: image paths may point
    outside the Parquet file's folder (absolute, or out with ``..``); by default such a row is
    invalid and the file is never opened."""

    caption: str = "caption"
    image: str = "image"
    id: str | None = None
    image_id: str | None = None
    image_emb: str | None = None
    text_emb: str | None = None
    allow_absolute_paths: bool = False


@dataclass(frozen=True)
class ResolvedColumns:
    """Column names present in the input. ``image`` is ``None`` when images come as embeddings,
    ``text_emb`` is ``None`` when captions are to be encoded from text."""

    caption: str
    image: str | None
    id: str | None
    image_id: str | None
    image_emb: str | None
    text_emb: str | None

    @property
    def image_side(self) -> tuple[str, ...]:
        """The columns of the image of a pair that this run reads (injected noise moves them,
        with the unread image column and ``image_emb``: :func:`ncclean.pipeline.corpus.
        inject_noise`)."""
        return tuple(c for c in (self.image, self.image_id, self.image_emb) if c is not None)

    def needed(self) -> list[str]:
        """Every column scoring reads, in schema order of appearance in this object."""
        names = [self.caption, self.image, self.id, self.image_id, self.image_emb, self.text_emb]
        return list(dict.fromkeys(n for n in names if n is not None))


def _missing(kind: str, name: str, schema: pa.Schema, option: str) -> SchemaError:
    available = ", ".join(schema.names) or "(none)"
    return SchemaError(
        f"no {kind} column {name!r} (set it with {option}); available columns: {available}"
    )


def resolve_columns(requested: Columns, schema: pa.Schema, *,
                    need_image: bool = True) -> ResolvedColumns:
    """Check ``requested`` against ``schema``.

    The caption column must exist and hold text. Images come from ``image_emb`` when it is named,
    else from ``image`` (required only when ``need_image``). Embedding columns must be lists of
    numbers. Raises :class:`SchemaError` naming the missing column and listing the available ones.
    """
    names = set(schema.names)
    if requested.caption not in names:
        raise _missing("caption", requested.caption, schema, "--caption-col")
    caption_type = schema.field(requested.caption).type
    if not (pa.types.is_string(caption_type) or pa.types.is_large_string(caption_type)
            or pa.types.is_string_view(caption_type)):
        raise SchemaError(
            f"caption column {requested.caption!r} holds {caption_type}, not text; "
            "point --caption-col at a string column"
        )

    for option, name in (("--image-emb-col", requested.image_emb),
                         ("--text-emb-col", requested.text_emb)):
        if name is None:
            continue
        if name not in names:
            raise _missing("embedding", name, schema, option)
        field_type = schema.field(name).type
        if not (pa.types.is_list(field_type) or pa.types.is_large_list(field_type)
                or pa.types.is_fixed_size_list(field_type)) or not (
                pa.types.is_floating(field_type.value_type)
                or pa.types.is_integer(field_type.value_type)):
            raise SchemaError(
                f"embedding column {name!r} holds {field_type}; expected a list of floats"
            )

    image: str | None = None
    if requested.image_emb is None:
        if requested.image in names:
            image = requested.image
        elif need_image:
            raise _missing("image", requested.image, schema, "--image-col or --image-emb-col")

    def optional(name: str | None, default: str, option: str) -> str | None:
        if name is None:
            return default if default in names else None
        if name not in names:
            raise _missing(option.removeprefix("--").removesuffix("-col").replace("-", " "),
                           name, schema, option)
        return name

    return ResolvedColumns(
        caption=requested.caption,
        image=image,
        id=optional(requested.id, "id", "--id-col"),
        image_id=optional(requested.image_id, IMAGE_ID, "--image-id-col"),
        image_emb=requested.image_emb,
        text_emb=requested.text_emb,
    )
