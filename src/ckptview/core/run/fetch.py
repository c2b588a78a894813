"""Before a run on a URL: download the file, or a model folder's config and weights, into a private folder.

The worker then loads local files and checks them like any other (the same census, the same consent).
Reads go through the byte layer's range requests (the same deadline, range checks and redaction).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import Progress
from ckptview.core.message import rephrased
from ckptview.core.read.bytes.remote.fs import RemoteFS, begin_session
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.bytes.remote.urls import shown
from ckptview.core.redaction import redact
from ckptview.core.run.architectures import (
    MAX_CONFIG_BYTES,
    Architecture,
    ArchitectureRefused,
    check_config_size,
    missing_library,
    parse_config,
    recognize_by_keys,
    recognize_config,
)
from ckptview.core.run.process import Cancellable, RunError

FETCH_BLOCK = 16 << 20  # bytes per range read
CONFIG_BLOCK = 256 << 10  # bytes per range read of a remote config.json: progress and cancel in between
# What a forward pass with no code needs of a model folder: its config, a tokenizer, and the weights (any
# library's names, shards and their index). Nothing else is downloaded (no code, no README, no images).
_WEIGHTS = r"(model|pytorch_model|diffusion_pytorch_model|adapter_model)(\.[A-Za-z0-9_-]+)?"
MODEL_FOLDER_FILES = re.compile(r"(config|tokenizer|generation_config|preprocessor_config)\.json"
                                rf"|{_WEIGHTS}(-\d+-of-\d+)?\.(safetensors|bin)"
                                rf"|{_WEIGHTS}\.(safetensors|bin)\.index(\.[A-Za-z0-9_-]+)?\.json")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


def shown_url(url: str) -> str:
    """A URL as output may show it (no credentials, no query)."""
    return str(shown(url))


def fetch(url: str, folder: str, token: Cancellable | None,
          options: RemoteOptions | None = None) -> Generator[Progress, None, str]:
    """Download `url` into `folder` (created private); returns the local file, or the local model folder.
    One remote session reads it all (`options`: what the user allowed)."""
    os.makedirs(folder, mode=0o700)
    fs = RemoteFS(begin_session(url, options))
    if fs.kind(url) != "dir":
        target = os.path.join(folder, os.path.basename(url.split("?", 1)[0].rstrip("/")) or "checkpoint")
        yield from fetch_file(fs, url, target, token)
        return target
    names = sorted(n for n in fs.listdir(url) if _PLAIN_NAME.fullmatch(n) and MODEL_FOLDER_FILES.fullmatch(n))
    if "config.json" not in names:
        raise RunError(f"{shown_url(url)} is a folder without config.json: ckptview runs a remote folder only "
                       f"when its config names the architecture; give the URL of one checkpoint file",
                       kind="input")
    local = os.path.join(folder, "model")
    os.mkdir(local, mode=0o700)
    base = url.split("?", 1)[0].rstrip("/")
    for name in names:  # plain names only: nothing from the listing can point outside `local`
        yield from fetch_file(fs, f"{base}/{name}", os.path.join(local, name), token)
    return local


def fetch_file(fs: RemoteFS, url: str, target: str, token: Cancellable | None) -> Generator[Progress, None, None]:
    """Download one file in 16 MiB range reads, with progress and cancel."""
    fmap = fs.file_map(url)
    try:
        size = fmap.size
        block = bytearray(min(size, FETCH_BLOCK) or 1)
        done = 0
        with open(target, "wb") as out:
            while done < size:
                if token is not None and token.cancelled:
                    raise RunError("cancelled", kind="cancelled")
                view = memoryview(block)[: min(len(block), size - done)]
                fmap.readinto(done, view)
                out.write(view)
                done += len(view)
                yield Progress(done, size, f"downloading {shown_url(url)}")
    finally:
        fmap.close()


def recognize_url(url: str, tensors: dict[str, Any] | None = None, token: Cancellable | None = None,
                  options: RemoteOptions | None = None) -> Generator[Progress, None, Architecture | None]:
    """The architecture a run of `url` would find, as `recognize` finds a local one: a folder URL by its
    config.json (listed and read through the byte layer, as data, at most 4 MB), a file URL (downloaded
    alone for a run, no config beside it) by its keys and shapes (`tensors`, from the open checkpoint).

    For the run panel's worker: progress and cancel between reads. Raises ArchitectureRefused (auto_map, an
    odd config, the library not installed) or RunError ('input': the config cannot be read); every message
    is one line with the URL redacted.
    """
    base = url.split("?", 1)[0].rstrip("/")
    try:
        yield Progress(0, 0, f"looking at {shown_url(url)}")
        fs = RemoteFS(begin_session(url, options))
        arch = None
        if fs.kind(url) == "dir":
            if token is not None and token.cancelled:
                raise RunError("cancelled", kind="cancelled")
            if "config.json" in fs.listdir(url):
                raw = yield from _read_config(fs, f"{base}/config.json", token)
                arch = recognize_config(parse_config(raw), tensors=tensors)
        if arch is None and tensors:
            arch = recognize_by_keys(tensors)
    except ArchitectureRefused as exc:
        raise ArchitectureRefused(rephrased(exc, redact)) from None
    except RunError:
        raise
    except (CheckpointError, OSError) as exc:  # RemoteError, not found, a deadline: one line
        if token is not None and token.cancelled:
            raise RunError("cancelled", kind="cancelled") from None
        raise RunError(redact(f"config.json of {shown_url(url)} not read: {exc}"), kind="input") from None
    if arch is not None and (missing := missing_library(arch)):
        raise ArchitectureRefused(missing)
    return arch


def _read_config(fs: RemoteFS, url: str, token: Cancellable | None) -> Generator[Progress, None, bytes]:
    """A remote config.json's bytes, refused before any is read when its size is too large for a config."""
    fmap = fs.file_map(url)
    try:
        size = fmap.size
        check_config_size(size)
        data = bytearray(size)
        done = 0
        while done < size:
            if token is not None and token.cancelled:
                raise RunError("cancelled", kind="cancelled")
            view = memoryview(data)[done: min(size, done + CONFIG_BLOCK)]
            fmap.readinto(done, view)
            done += len(view)
            yield Progress(done, size, f"reading {shown_url(url)}")
        return bytes(data[:MAX_CONFIG_BYTES])
    finally:
        fmap.close()
