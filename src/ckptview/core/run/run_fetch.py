"""Before a run on a URL: download the file, or a model folder's config and weights, into a private folder.

The worker then loads local files and checks them like any other (the same census, the same consent).
Reads go through the byte layer's range requests (the same deadline, range checks and redaction).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator

from ckptview.core.jobs import Progress
from ckptview.core.run.run_process import Cancellable, RunError

FETCH_BLOCK = 16 << 20  # bytes per range read
# What a forward pass with no code needs of a model folder: its config, a tokenizer, and the weights (any
# library's names, shards and their index). Nothing else is downloaded (no code, no README, no images).
_WEIGHTS = r"(model|pytorch_model|diffusion_pytorch_model|adapter_model)(\.[A-Za-z0-9_-]+)?"
MODEL_FOLDER_FILES = re.compile(r"(config|tokenizer|generation_config|preprocessor_config)\.json"
                                rf"|{_WEIGHTS}(-\d+-of-\d+)?\.(safetensors|bin)"
                                rf"|{_WEIGHTS}\.(safetensors|bin)\.index(\.[A-Za-z0-9_-]+)?\.json")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


def shown_url(url: str) -> str:
    """A URL as output may show it (no credentials, no query)."""
    from ckptview.core.read.remote import shown

    return str(shown(url))


def fetch(url: str, folder: str, token: Cancellable | None) -> Generator[Progress, None, str]:
    """Download `url` into `folder` (created private); returns the local file, or the local model folder."""
    from ckptview.core.read.remote.paths import exists_kind, listdir

    os.makedirs(folder, mode=0o700)
    if exists_kind(url) != "dir":
        target = os.path.join(folder, os.path.basename(url.split("?", 1)[0].rstrip("/")) or "checkpoint")
        yield from fetch_file(url, target, token)
        return target
    names = sorted(n for n in listdir(url) if _PLAIN_NAME.fullmatch(n) and MODEL_FOLDER_FILES.fullmatch(n))
    if "config.json" not in names:
        raise RunError(f"{shown_url(url)} is a folder without config.json: ckptview runs a remote folder only "
                       f"when its config names the architecture; give the URL of one checkpoint file",
                       kind="input")
    local = os.path.join(folder, "model")
    os.mkdir(local, mode=0o700)
    base = url.split("?", 1)[0].rstrip("/")
    for name in names:  # plain names only: nothing from the listing can point outside `local`
        yield from fetch_file(f"{base}/{name}", os.path.join(local, name), token)
    return local


def fetch_file(url: str, target: str, token: Cancellable | None) -> Generator[Progress, None, None]:
    """Download one file in 16 MiB range reads, with progress and cancel."""
    from ckptview.core.read.files import FileMap

    fmap = FileMap(url)
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
