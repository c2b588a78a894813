"""Why a request failed, in a few words for a person: 'host not found (DNS)', 'timed out after 30 s', ..."""

from __future__ import annotations

import re

from ckptview.core.errors import RemoteError
from ckptview.core.redaction import redact

_TLS = re.compile(r"\[SSL(?:: [A-Z0-9_]+)?\] ([^(\]'\"]{1,120})")


def network_cause(exc: BaseException, timeout: float) -> str:
    """A short cause for a failed request: 'host not found', 'connection refused', 'timed out', ..."""
    import socket

    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 10:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__ or (cur.args[0] if cur.args and isinstance(cur.args[0], BaseException) else None)
    names = " ".join(type(e).__name__ for e in seen) + " " + " ".join(str(e) for e in seen)
    if any(isinstance(e, socket.gaierror) for e in seen) or "NameResolution" in names or "Name or service" in names:
        return "host not found (DNS)"
    if any(isinstance(e, (TimeoutError, socket.timeout)) for e in seen) or "Timeout" in names or "timed out" in names:
        return f"timed out after {timeout:g} s"
    if any(isinstance(e, ConnectionRefusedError) for e in seen) or "refused" in names.lower():
        return "connection refused"
    if any(isinstance(e, ConnectionResetError) for e in seen) or "reset" in names.lower():
        return "connection reset by the server"
    tls = _TLS.search(names)
    if tls is not None:  # '[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1000)'
        return f"TLS failed: {tls.group(1).strip()}"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return redact(text)[:160]


def missing_error(message: str) -> RemoteError:
    """A RemoteError saying the file is not there (HTTP 404, no such key): `exists_kind` answers None."""
    exc = RemoteError(message)
    exc.missing = True  # type: ignore[attr-defined]  # a marker read back by is_missing() via getattr
    return exc


def is_missing(exc: BaseException) -> bool:
    """True for the error of a URL that names nothing (as opposed to a network or access failure)."""
    return bool(getattr(exc, "missing", False))


def status_cause(status: int) -> str:
    if status == 404:
        return "not found (HTTP 404)"
    if status in (401, 403):
        return (f"access denied (HTTP {status}): credentials come from HF_TOKEN or the hub's token file, "
                "AWS environment/profiles, or ~/.netrc")
    if status == 416:
        return "range not satisfiable (HTTP 416)"
    return f"HTTP {status}"
