"""Errors the core raises, each with a one-line message meant for a person, in no front end's words."""

from __future__ import annotations

from ckptview.core.message import Message
from ckptview.core.redaction import redact


def one_line(message: str) -> str:
    """`message` on one line (its whitespace runs made single spaces), a Message's hints kept."""
    if isinstance(message, Message):
        return message.map(one_line)
    return " ".join(str(message).split())


class CheckpointError(Exception):
    """Base of every error ckptview raises about a file; str(err) is one line for a person.

    `message` is that line, a `core.message.Message` when the error says what fixes it: the front ends
    word its hints (a flag, a button)."""

    def __init__(self, message: str) -> None:
        self.message = one_line(message)
        super().__init__(self.message)


class NotACheckpointError(CheckpointError):
    """The file is not in any format ckptview reads."""


class NoSuchFile(NotACheckpointError):
    """Nothing at the path (a file, a folder or a URL)."""


class FolderOfCheckpoints(NotACheckpointError):
    """A folder that is no checkpoint but holds some (a training run): the message says what opens them,
    `folder` and `names` (its checkpoint files, sorted) let a window offer to open them."""

    def __init__(self, message: str, folder: str, names: list[str]) -> None:
        super().__init__(message)
        self.folder, self.names = folder, list(names)


class CheckpointFormatError(CheckpointError):
    """The file claims a known format but is malformed, truncated or inconsistent."""


class UnsafePickleError(CheckpointFormatError):
    """The pickle asks for something the safe reader refuses to emulate."""


class TensorDataError(CheckpointError):
    """A tensor's values cannot be read (broken entry, missing storage, unsupported dtype)."""


class Cancelled(Exception):
    """A long job was cancelled through its CancelToken."""


class RemoteError(CheckpointError):
    """A remote file cannot be reached or read (DNS, refused, timeout, HTTP error): one line naming the URL.

    Its message is redacted when it is made (no userinfo, no query string: presigned tokens), whatever
    a library put into it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message.map(redact) if isinstance(message, Message) else redact(str(message)))


class RangesIgnored(RemoteError):
    """A server that ignores range requests: reading its file means downloading it whole, which needs the
    user's yes. `url` is the URL as shown; `size` the bytes it announces (None: it announces none)."""

    def __init__(self, message: str, url: str, size: int | None) -> None:
        super().__init__(message)
        self.url, self.size = url, size


class RemoteTooSlow(RemoteError):
    """A request that got no complete answer within its deadline (`seconds`, the allowance it had)."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class FileChangedError(CheckpointError):
    """The file was replaced, truncated or rewritten on disk after it was opened; reopen it to read it."""

    def __init__(self, path: str, what: str = "") -> None:
        detail = f" ({what})" if what else ""
        super().__init__(f"the file changed on disk since it was opened{detail}: {path}")
        self.path, self.what = path, what


# Errors a reader must pass on rather than turn into a warning about one part of a folder.
UNRECOVERABLE = (RemoteError, FileChangedError)
