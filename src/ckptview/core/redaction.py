"""The one redaction of text shown to a person: no userinfo, no query string, wherever they appear.

Presigned URLs carry their token in the query string, and libraries quote URLs in their own ways:
urllib3 prints a bare path with its query (`Max retries exceeded with url: /m.pt?X-Amz-Signature=...`),
proxies appear as `http://user:password@proxy`. Every error text of the remote layer passes through
`redact` (a `RemoteError` does when it is made; the command line and the window for anything naming a
URL), so none of these reaches a terminal, a log or the window.
"""

from __future__ import annotations

import re

# '?' right after a non-space character and followed by one: a query string (of a URL or a bare path),
# up to the next space or quote. Ordinary questions ('a checkpoint? no') have a space after the '?', and
# one in brackets ('(connection cut?)') only closing brackets; a query after brackets ('?)sig=') is one.
_QUERY = re.compile(r"(?<=\S)\?(?![)\]}]+(?:\s|$))[^\s'\"<>]+")
# A fragment of a URL with a scheme ('https://host/m.pt#token').
_FRAGMENT = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s#'\"<>]*)#[^\s'\"<>]*")
# userinfo after '//' (with or without a scheme): 'https://user:pw@host' -> 'https://host'.
_USERINFO = re.compile(r"//[^/\s@'\"<>]*@")


def redact(text: str) -> str:
    """`text` without any userinfo, query string or URL fragment in it."""
    if "?" in text:
        text = _QUERY.sub("", text)
    if "#" in text:
        text = _FRAGMENT.sub(r"\1", text)
    if "@" in text:
        text = _USERINFO.sub("//", text)
    return text
