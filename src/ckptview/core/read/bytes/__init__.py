"""The byte layer: every read, local or remote, positioned and identity-checked (no memory maps);
zip directories as torch reads them; a storage's bytes (`ByteSource`); remote files by range requests."""

from __future__ import annotations

from ckptview.core.read.bytes.files import FileIdentity, FileMap, ReadAhead, is_url, open_regular
from ckptview.core.read.bytes.sources import FileSlice, MemorySource, ZipMember

__all__ = ["FileIdentity", "FileMap", "FileSlice", "MemorySource", "ReadAhead", "ZipMember", "is_url", "open_regular"]
