"""The byte layer: every read, local or remote, positioned and identity-checked (no memory maps);
zip directories as torch reads them; a storage's bytes (`ByteSource`); remote files by range requests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.bytes.files import FileIdentity, FileMap, ReadAhead, is_url, open_regular
    from ckptview.core.read.bytes.sources import FileSlice, MemorySource, ZipMember

__all__ = ["FileIdentity", "FileMap", "FileSlice", "MemorySource", "ReadAhead", "ZipMember", "is_url", "open_regular"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "files": ["FileIdentity", "FileMap", "ReadAhead", "is_url", "open_regular"],
    "sources": ["FileSlice", "MemorySource", "ZipMember"],
})
