"""One module per subcommand: `add_parser(subparsers)` and `run(args) -> int`."""

from __future__ import annotations

from ckptview.core.gc_policy import keep_out_of_collections

__all__ = ["KEEP_UNTIL_EXIT", "keep_until_exit"]

# Set by the console script (`cli.entry`) for the commands whose process ends right after their output
# (`info`, `diff`): what they built is then kept, out of the collector's view, instead of being freed
# object by object (a quarter of a second per 100,000 tensors) just before the process ends anyway.
KEEP_UNTIL_EXIT = False
_kept: list[object] = []


def keep_until_exit(*objects: object) -> bool:
    """Keep `objects` until the process ends, when `KEEP_UNTIL_EXIT` is set; False (nothing kept) otherwise."""
    if not KEEP_UNTIL_EXIT:
        return False
    _kept.extend(objects)
    keep_out_of_collections()  # no collection walks them again; the exit frees nothing one by one
    return True
