"""Reading a document: the checked open, decoding, the streamed digest."""

from __future__ import annotations

import pytest

from mdindex.documents.reading import decode, read_bytes, text_digest
from mdindex.documents.types import digest
from mdindex.errors import BinaryFile, DecodeError, FileTooLarge, UnreadableFile


def test_decode_strips_bom_and_normalises_newlines() -> None:
    assert decode("\ufeffa\r\nb\rc\n".encode()) == "a\nb\nc\n"


def test_decode_rejects_nul_and_invalid_utf8() -> None:
    with pytest.raises(BinaryFile, match="NUL"):
        decode(b"# title\x00\x01")
    with pytest.raises(DecodeError, match="byte 2"):
        decode(b"ab\xff\xfe")


def test_read_bytes_limits(tmp_path) -> None:
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(FileTooLarge, match="max_file_bytes"):
        read_bytes(big, 1000)
    with pytest.raises(UnreadableFile, match="vanished"):
        read_bytes(tmp_path / "gone.md", 1000)
    assert read_bytes(big, 5000) == b"x" * 2000


def test_text_digest_streams_what_decode_gives(tmp_path) -> None:
    path = tmp_path / "f.md"
    for data in (
        "\ufeffa\r\nb\rc\n".encode(),
        b"x" * (1 << 20) + b"\r\n" + "é".encode() * 600_000 + b"\r",  # CRLF across a piece
        b"",
    ):
        path.write_bytes(data)
        assert text_digest(path, 10**8) == digest(decode(data))
    path.write_bytes(b"ok\xff")
    with pytest.raises(DecodeError):
        text_digest(path, 10**8)
