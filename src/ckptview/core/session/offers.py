"""What a tab that could not open its file says in the window's own words, and the actions that fix it.

The tab passes the error's text already in the window's words (`gui/base/wording.py` words the fixes a
core message carries). Each error the window knows how to resolve gets a sentence of its own and a button
that does what the fix says: open the folder as a run, open the one checkpoint a folder holds, download a
file whose server ignores range requests (its size said first), wait longer for a slow server. Qt-free:
the tab makes the buttons from these offers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ckptview.core.errors import FolderOfCheckpoints, RangesIgnored, RemoteTooSlow
from ckptview.core.read.folder_contents import listed
from ckptview.core.units import human_bytes, plural

__all__ = ["DOWNLOAD_LIMIT", "Offer", "offers_for"]

DOWNLOAD_LIMIT = 4 << 30  # bytes "Download and open" fetches at most from a server that announces no size
SERIES, OPEN, DOWNLOAD, WAIT, COMPARE, EACH = "series", "open", "download", "wait", "compare", "each"


@dataclass(frozen=True)
class Offer:
    """One action the error page offers: `key` (what the tab does), the button's text and tooltip, and
    `value` (the path to open, the byte limit of a download, the seconds to wait); `choices` (the two paths to
    compare, the paths of EACH) and `names` (when given, the button is a menu of them, one per choice)."""

    key: str
    text: str
    tip: str
    value: str | int | float | None = None
    choices: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


def offers_for(error: BaseException | None, text: str) -> tuple[str, list[Offer]]:
    """The sentence the error page shows for `error` (its one-line `text`, in the window's words) and the
    actions it offers."""
    if isinstance(error, FolderOfCheckpoints) and error.names:
        return _folder(error)
    if isinstance(error, RangesIgnored):
        return _ranges(error)
    if isinstance(error, RemoteTooSlow):
        wait = max(4 * error.seconds, 60.0)
        return (text + ": the server may be slow or stalled.",
                [Offer(WAIT, f"Reload, waiting up to {wait:.0f} s", "Open it again, giving every request of "
                       f"this tab {wait:.0f} s from now on", wait)])
    return text, []


def _folder(error: FolderOfCheckpoints) -> tuple[str, list[Offer]]:
    names, folder = error.names, error.folder  # in natural order: a run's latest last
    paths = [os.path.join(folder, name) for name in names]
    if len(names) == 1:
        return (f"This folder is not a checkpoint itself; it holds one, {names[0]}.",
                [Offer(OPEN, f"Open {names[0]}", f"Open {paths[0]} in a tab of its own", paths[0])])
    # Short button texts (the names are in the tooltips and the menu): a long name never widens the window.
    series = Offer(SERIES, "Open as series", "Show its checkpoints as a training run: norms, update ratios and "
                   "findings over the steps (File > Open Series…)", folder)
    compare = Offer(COMPARE, "Compare first and last", f"Compare {names[0]} with {names[-1]}, tensor by tensor",
                    choices=(paths[0], paths[-1]))
    latest = Offer(OPEN, "Open the last", f"Open {names[-1]} in a tab of its own", paths[-1])
    each = Offer(EACH, "Open one…", "Open any of them in a tab of its own", choices=tuple(paths), names=tuple(names))
    return (f"This folder holds {plural(len(names), 'checkpoint')} ({listed(names)}), not one: open one, compare "
            "two, or follow them as a training run.", [series, compare, latest, each])


def _ranges(error: RangesIgnored) -> tuple[str, list[Offer]]:
    name = error.url.rsplit("/", 1)[-1] or error.url
    said = f"The server of {name} does not honour range requests: reading it means downloading the whole file"
    if error.size is not None:
        size = human_bytes(error.size)
        return (f"{said}, {error.size:,} bytes ({size}), into a temporary file that goes when the tab closes.",
                [Offer(DOWNLOAD, f"Download and open ({size})", f"Download {error.size:,} bytes, then open it",
                       error.size)])
    limit = human_bytes(DOWNLOAD_LIMIT)
    return (f"{said}, and it does not say how large the file is: the download stops at {limit}.",
            [Offer(DOWNLOAD, f"Download and open (at most {limit})", f"Download at most {limit}, then open it",
                   DOWNLOAD_LIMIT)])
