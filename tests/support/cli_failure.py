"""What a failed command leaves on stdout (docs/cli.md, Failures): nothing, or under --json one error object."""

from __future__ import annotations

import json
from collections.abc import Sequence


def failure_stdout(out: str, argv: Sequence[str] = ("--json",)) -> bool:
    """True when `out` is what a failure of `argv` prints on stdout: under --json exactly one object
    `{"error": {"kind", "message"}}`, else nothing."""
    if "--json" not in argv:
        return out == ""
    try:
        data = json.loads(out)
    except ValueError:
        return False
    return (isinstance(data, dict) and set(data) == {"error"} and isinstance(data["error"], dict)
            and set(data["error"]) == {"kind", "message"})
