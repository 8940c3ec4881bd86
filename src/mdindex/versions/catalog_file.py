"""What a catalog file may hold, checked before anything in it is used: strict
types, bounded strings, every fingerprint twelve hex digits, every collection
this collection's (``catalog.Catalog.load``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from mdindex.config import iso_639_1
from mdindex.outside import quoted, stamp
from mdindex.runtime import physical_name

_FP = r"^[0-9a-f]{12}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Params(_Strict):
    """The index settings a version records (``settings.index.params()``), typed as
    the settings are."""

    model: str | None = Field(default=None, max_length=4096)
    strategy: Literal["heading", "token", "semantic"] | None = None
    max_tokens: int | None = Field(default=None, ge=8)
    max_chars: int | None = Field(default=None, ge=16)
    overlap_tokens: int | None = Field(default=None, ge=0)
    noise_sections: list[Annotated[str, Field(max_length=1024)]] | None = None
    prepend_context: bool | None = None
    sparse_vectors: bool | None = None
    semantic_threshold: float | None = Field(default=None, ge=-1.0, le=1.0, strict=False)
    min_sentences: int | None = Field(default=None, ge=1)
    embedding_model: str | None = Field(default=None, max_length=4096)
    language: str | None = Field(default=None, max_length=4)
    embedding_input_type: bool | None = None
    query_prompt: str | None = Field(default=None, max_length=200)
    document_prompt: str | None = Field(default=None, max_length=200)
    quantization: Literal["none", "int8"] | None = None

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        # what the language setting takes: [a-z]{2} let "cn" through, a country
        if value is not None and value != "auto" and not iso_639_1(value):
            raise ValueError(f"language must be auto or an ISO 639-1 code, not {quoted(value)}")
        return value


class _Code(_Strict):
    """The code versions a fingerprint was made with (``runtime.code_versions``)."""

    chunker: int = Field(ge=1, le=1_000_000)
    sparse: dict[Annotated[str, Field(max_length=40)], float | int | str] | None = Field(
        max_length=16
    )


class VersionFile(_Strict):
    collection: str
    params: _Params
    status: Literal["building", "complete", "dropping"] = "building"
    created_at: str = ""
    completed_at: str = ""
    live_since: str = ""
    points: int = Field(default=0, ge=0, le=10**12)  # it decides quantization = "auto"
    documents: int = Field(default=0, ge=0, le=10**12)
    embedded: int = Field(default=0, ge=0, le=10**12)
    code: _Code | None = None  # None: a catalog from before versions recorded it

    @field_validator("created_at", "completed_at", "live_since")
    @classmethod
    def _stamp(cls, value: str, info: ValidationInfo) -> str:
        # shown by `versions` and sorted on: year 99999 or 4 KB of digits is damage
        return stamp(value, str(info.field_name))


class _Pin(_Strict):
    fingerprint: Annotated[str, Field(pattern=_FP)]
    over: Annotated[str, Field(pattern=_FP)]


class CatalogFile(_Strict):
    alias: str
    live: Annotated[str, Field(pattern=_FP)] | None = None
    pinned: _Pin | None = None
    versions: dict[Annotated[str, Field(pattern=_FP)], VersionFile] = Field(default_factory=dict)
    switching: Annotated[str, Field(pattern=_FP)] | None = None
    adopted_from: str | None = None

    def check(self, collection: str) -> None:
        """What types alone cannot say: every name belongs to this collection."""
        if self.alias != collection:
            raise ValueError(f"alias {quoted(self.alias)} is not the collection {collection!r}")
        for fp, version in self.versions.items():
            if version.collection != physical_name(collection, fp):
                raise ValueError(
                    f"version {fp} names collection {quoted(version.collection)}, "
                    f"not {physical_name(collection, fp)!r}"
                )
        for name, named in (("live", self.live), ("switching", self.switching)):
            if named is not None and named not in self.versions:
                raise ValueError(f"{name} names {named}, which is no version")
        if self.adopted_from is not None and self.adopted_from != collection:
            raise ValueError(f"adopted_from {quoted(self.adopted_from)} is not {collection!r}")


def first_line(exc: BaseException) -> str:
    """Why a catalog file was refused, in one line."""
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "catalog"
        return f"{where[:120]}: {err['msg']}"
    return " ".join(str(exc).split())[:200]
