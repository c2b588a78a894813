"""Format readers, chosen by sniffing bytes (or a folder's content), never by extension.

Each reader is a module that satisfies `Reader`: `NAME`, `PRIORITY` (higher is tried first),
`sniff(source) -> bool` and `open(source, ctx) -> Checkpoint`. `source` is a `context.Source`: the file
or folder as the byte layer found it when the open began (`path`, local or URL; `head`, its first bytes,
b"" for a folder; `is_dir`; `identity`). A reader reads its source only through `source.file_map()` or
`source.open_file()`, which refuse a file swapped in since (FileChangedError); what it opens beside it
(shards, parts) it opens through `ctx.open_child(path)` or the byte layer. `ctx` is the open's
`ReaderContext` (cancel, progress, remote session, nesting), passed explicitly. Adding a format is
adding a module and listing it in `readers()`, where mypy checks it against `Reader`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol

from ckptview.core.read.formats import (
    dcp,
    gguf_file,
    hf_sharded,
    plain_pickle,
    safetensors_file,
    torch_export,
    torch_legacy,
    torch_zip,
    training_folder,
)

__all__ = ["Reader", "readers"]

if TYPE_CHECKING:
    from ckptview.core.checkpoint import Checkpoint
    from ckptview.core.read.context import ReaderContext, Source


class Reader(Protocol):
    """The interface of a format reader (a module: its constants and two functions)."""

    NAME: str
    PRIORITY: int

    def sniff(self, source: Source) -> bool:
        """True when the source (its path, its first bytes, a folder's content) looks like this format."""
        ...

    def open(self, source: Source, ctx: ReaderContext) -> Checkpoint:  # noqa: A003 - the protocol's name
        """The checkpoint's metadata (never its tensor bytes, never running its code)."""
        ...


@functools.cache
def readers() -> tuple[Reader, ...]:
    """Every reader, highest declared priority first."""
    registered: tuple[Reader, ...] = (
        torch_zip, torch_legacy, safetensors_file, gguf_file, plain_pickle,
        # folder and multi-file formats (sharded, distributed, exported programs)
        training_folder, hf_sharded, dcp, torch_export,
    )
    return tuple(sorted(registered, key=lambda r: -r.PRIORITY))
