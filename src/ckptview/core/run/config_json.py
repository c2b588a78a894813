"""A model folder's JSON configs (`config.json`, `preprocessor_config.json`) as data: nesting and size checked
while the bytes are scanned, before anything parses, copies or walks them.

Python's `json` parses nested containers by recursion, `copy.deepcopy` and `json.dumps` recurse once per level
too: a 2 KB config nested 900 levels deep parsed, then ended every command in "internal error: RecursionError"
(issue 43, finding 10). So the bytes are scanned first, in one linear pass that never recurses: every string is
skipped whole (an escaped quote included, an unterminated one to the end), every bracket outside strings counted.
Past `config_guard.MAX_DEPTH` levels, or `MAX_TOKENS` strings and brackets, the config is refused in one line;
only then does `json.loads` see it, at a depth its recursion holds with room to spare. The scan charges the work
budget of the bytes (`core/budget.py`), one unit per string or bracket.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.run.config_guard import MAX_DEPTH, ConfigRefused

MAX_TOKENS = 2_000_000  # strings and brackets of one config (a real one has a few thousand)

# A string (escapes skipped two bytes at a time, the closing quote optional so that an unterminated one ends
# the scan instead of being tried again from every later quote), an opening or a closing bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]', re.DOTALL)
_OPEN, _CLOSE = frozenset(b"[{"), frozenset(b"]}")


def check_nesting(raw: bytes, where: str = "config.json") -> int:
    """The deepest nesting of `raw` as JSON (0 for a scalar); ConfigRefused past MAX_DEPTH or MAX_TOKENS.
    Malformed JSON is left to the parser: this only bounds what the parser would be asked to do."""
    budget = Budget.for_stored(len(raw), where)
    depth = deepest = 0
    for tokens, match in enumerate(_TOKEN.finditer(raw), 1):
        if tokens > MAX_TOKENS:
            raise ConfigRefused(f"{where} holds more than {MAX_TOKENS:,} strings and brackets: not a model config")
        budget.charge(1, "strings and brackets scanned")
        first = raw[match.start()]
        if first in _OPEN:
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigRefused(f"{where} nests deeper than {MAX_DEPTH} levels: not a model config")
            deepest = max(deepest, depth)
        elif first in _CLOSE:
            depth = max(0, depth - 1)
    return deepest


def load_json(raw: bytes, where: str = "config.json") -> Any:
    """`raw` parsed as JSON after `check_nesting`; ConfigRefused when it nests too deep, is too large or is
    not JSON (one line each)."""
    check_nesting(raw, where)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigRefused(f"{where} is not valid JSON: {type(exc).__name__}") from None
