"""TensorBoard event files read as data: their scalars by tag and step (Qt-free, never TensorFlow).

An event file (``events.out.tfevents.*``) is a TFRecord stream: each record is a little-endian uint64
length, the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data; each record's data
is a serialized ``tensorboard.Event``. The framing is read here over the byte layer (a regular file opened
without blocking, read forward up to the size it had when opened: a file a live run is still writing ends
in a partial record, which is left for the next read); every CRC is checked (google-crc32c), and each
record is decoded by the protobuf library against the few fields of TensorBoard's ``event.proto``,
``summary.proto`` and ``tensor.proto`` read here (same names and numbers; every other field, images and
histograms included, is skipped by the parser). Why not tensorboard's own reader: its
``EventFileLoader`` imports TensorFlow when it is installed, reads outside the byte layer (``gfile``: a
FIFO blocks it, a URL goes around the session), and without TensorFlow computes each CRC in pure Python
(docs/guide/series.md has the timings).

Scalars are the summary values TensorBoard's Scalars dashboard shows: ``simple_value`` (what
``torch.utils.tensorboard``, tensorboardX, Lightning and the HF Trainer write) and 0-d float/int tensors of
the ``scalars`` plugin (TF2's ``tf.summary.scalar``). Every record read charges the budget of the file's
bytes; a record that claims more bytes than the file holds, fails its CRC or does not decode ends the
reading of that file, the records before it kept, with one line saying which.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.fs import FileSystem

EVENT_FILE = re.compile(r"^events\.out\.tfevents\.")
HEADER = 12  # uint64 length + uint32 masked CRC32C of it
FOOTER = 4  # uint32 masked CRC32C of the data
BLOCK = 1 << 20  # bytes read at a time
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
# TensorFlow's DataType numbers of the scalar tensors read (types.proto): the struct code of each.
_TENSOR_DTYPES = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e"}
_SCALARS_PLUGIN = "scalars"
_DATA_CLASS_SCALAR = 1


def is_event_file(name: str) -> bool:
    """True for a TensorBoard event file's name."""
    return bool(EVENT_FILE.match(name))


@dataclass
class TagPoints:
    """One tag's points in file order: step, wall time and value."""

    steps: list[int] = field(default_factory=list)
    wall_times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass
class EventScalars:
    """The scalars of one event file, by tag, and how its reading ended."""

    path: str
    tags: dict[str, TagPoints] = field(default_factory=dict)
    records: int = 0
    error: str | None = None  # a corrupt record ended the reading (the records before it are kept)
    partial: bool = False  # it ends in a record not written whole yet (a run still writing)


class EventFileError(CheckpointError):
    """An event file whose records cannot be read (one line: which record, and why)."""


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C of `data`."""
    crc = int(_crc32c()(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@cache
def _crc32c() -> Any:
    import google_crc32c

    return google_crc32c.value


@cache
def event_class() -> Any:
    """The protobuf message class of an ``Event`` with the fields read here (built once, in a pool of its own:
    no clash with tensorboard's own ``tensorboard.Event`` when that is imported too)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    optional, repeated = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(name="ckptview_tfevents.proto", package="ckptview.tfevents",
                                               syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, int, int, str]], oneof: str | None = None,
                in_oneof: tuple[str, ...] = ()) -> None:
        m = proto.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for field_name, number, kind, label, type_name in fields:
            fd = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                fd.type_name = f".ckptview.tfevents.{type_name}"
            if field_name in in_oneof:
                fd.oneof_index = 0

    message("Event", [("wall_time", 1, f.TYPE_DOUBLE, optional, ""), ("step", 2, f.TYPE_INT64, optional, ""),
                      ("file_version", 3, f.TYPE_STRING, optional, ""), ("summary", 5, f.TYPE_MESSAGE, optional, "Summary")],
            "what", ("file_version", "summary"))
    message("Summary", [("value", 1, f.TYPE_MESSAGE, repeated, "Value")])
    # Tags as bytes: a tag that is not UTF-8 is shown escaped rather than refusing the record.
    message("Value", [("tag", 1, f.TYPE_BYTES, optional, ""), ("simple_value", 2, f.TYPE_FLOAT, optional, ""),
                      ("tensor", 8, f.TYPE_MESSAGE, optional, "TensorProto"),
                      ("metadata", 9, f.TYPE_MESSAGE, optional, "SummaryMetadata")],
            "value", ("simple_value", "tensor"))
    message("SummaryMetadata", [("plugin_data", 1, f.TYPE_MESSAGE, optional, "PluginData"),
                                ("data_class", 4, f.TYPE_INT32, optional, "")])
    message("PluginData", [("plugin_name", 1, f.TYPE_BYTES, optional, "")])
    message("TensorProto", [("dtype", 1, f.TYPE_INT32, optional, ""),
                            ("tensor_shape", 2, f.TYPE_MESSAGE, optional, "TensorShapeProto"),
                            ("tensor_content", 4, f.TYPE_BYTES, optional, ""),
                            ("float_val", 5, f.TYPE_FLOAT, repeated, ""), ("double_val", 6, f.TYPE_DOUBLE, repeated, ""),
                            ("int_val", 7, f.TYPE_INT32, repeated, ""), ("int64_val", 10, f.TYPE_INT64, repeated, ""),
                            ("half_val", 13, f.TYPE_INT32, repeated, "")])
    message("TensorShapeProto", [("dim", 2, f.TYPE_MESSAGE, repeated, "Dim")])
    message("Dim", [("size", 1, f.TYPE_INT64, optional, "")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ckptview.tfevents.Event"))


def read_event_file(path: str, fs: FileSystem, budget: Budget | None = None,
                    token: CancelToken | None = None) -> EventScalars:
    """The scalars of the event file at `path`, read through `fs` (see the module docstring).

    A corrupt record ends the reading (`error`); a partial last record is left unread (`partial`). A file
    that cannot be opened raises CheckpointError."""
    out = EventScalars(path)
    try:
        import google.protobuf  # noqa: F401 - the decoder and the checksum, both of the `series` extra
        import google_crc32c  # noqa: F401
    except ImportError:
        raise EventFileError("reading event files needs protobuf and google-crc32c "
                             "(pip install 'ckptview[series]')") from None
    with fs.open_regular(path) as fh:
        size = fs.getsize(path)
        budget = budget if budget is not None else Budget.for_stored(size, f"event file {path}", cancel=token)
        reader = _Records(fh, size)
        scalar_tags: set[str] = set()  # tags whose first value said they are scalars (TF2 writes it once)
        while True:
            try:
                data = reader.next()
            except EventFileError as exc:
                out.error = f"record {out.records + 1}: {exc}"
                break
            if data is None:
                out.partial = reader.partial
                break
            budget.charge(HEADER + len(data) + FOOTER, "event records")
            try:
                event = event_class().FromString(data)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError (and RecursionError): a corrupt record
                out.error = f"record {out.records + 1}: not an event ({type(exc).__name__})"
                break
            out.records += 1
            if event.WhichOneof("what") == "summary":
                _scalars(event, out, scalar_tags, budget)
    return out


def _scalars(event: Any, out: EventScalars, scalar_tags: set[str], budget: Budget) -> None:
    for value in event.summary.value:
        budget.charge(1, "summary values")
        tag = value.tag.decode("utf-8", "replace")
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            number = float(value.simple_value)
        elif kind == "tensor":
            if value.HasField("metadata"):
                meta = value.metadata
                if (meta.plugin_data.plugin_name.decode("utf-8", "replace") == _SCALARS_PLUGIN
                        or meta.data_class == _DATA_CLASS_SCALAR):
                    scalar_tags.add(tag)
            if tag not in scalar_tags:
                continue
            found = _tensor_scalar(value.tensor)
            if found is None:
                continue
            number = found
        else:
            continue
        points = out.tags.get(tag)
        if points is None:
            points = out.tags[tag] = TagPoints()
        points.steps.append(int(event.step))
        points.wall_times.append(float(event.wall_time))
        points.values.append(number)


def _tensor_scalar(tensor: Any) -> float | None:
    """The value of a 0-d (or one-element) numeric TensorProto, else None."""
    if any(d.size != 1 for d in tensor.tensor_shape.dim):
        return None
    code = _TENSOR_DTYPES.get(tensor.dtype)
    if code is None:
        return None
    if tensor.tensor_content:
        if len(tensor.tensor_content) != struct.calcsize(code):
            return None
        return float(struct.unpack(code, tensor.tensor_content)[0])
    if tensor.dtype == 1 and len(tensor.float_val) == 1:
        return float(tensor.float_val[0])
    if tensor.dtype == 2 and len(tensor.double_val) == 1:
        return float(tensor.double_val[0])
    if tensor.dtype == 3 and len(tensor.int_val) == 1:
        return float(tensor.int_val[0])
    if tensor.dtype == 9 and len(tensor.int64_val) == 1:
        return float(tensor.int64_val[0])
    if tensor.dtype == 19 and len(tensor.half_val) == 1:
        return float(struct.unpack("<e", struct.pack("<H", tensor.half_val[0] & 0xFFFF))[0])
    return None


class _Records:
    """TFRecord framing over a file read forward in blocks, never past `size` (the size when it was opened)."""

    def __init__(self, fh: Any, size: int) -> None:
        self.fh = fh
        self.size = size
        self.offset = 0  # file offset of buf[0]
        self.buf = bytearray()
        self.pos = 0
        self.partial = False

    def _have(self, n: int) -> bool:
        """Make `n` bytes from `pos` available; False when the file (as opened) ends first."""
        while len(self.buf) - self.pos < n:
            read_to = self.offset + len(self.buf)
            if read_to >= self.size:
                return False
            want = min(max(n - (len(self.buf) - self.pos), BLOCK), self.size - read_to)
            if self.pos:  # drop what was consumed: the buffer holds at most one record and a block
                del self.buf[:self.pos]
                self.offset += self.pos
                self.pos = 0
            chunk = self.fh.read(want)
            if not chunk:
                self.size = self.offset + len(self.buf)  # shorter than it was: read what is there
                return False
            self.buf += chunk
        return True

    def next(self) -> bytes | None:
        """The next record's data; None at the end (`partial` when a record was cut short)."""
        if not self._have(HEADER):
            self.partial = len(self.buf) > self.pos
            return None
        length, length_crc = _HEADER.unpack_from(self.buf, self.pos)
        if masked_crc32c(bytes(self.buf[self.pos:self.pos + 8])) != length_crc:
            raise EventFileError("its length fails the CRC check")
        start = self.offset + self.pos
        if length > self.size - start - HEADER - FOOTER or not self._have(HEADER + length + FOOTER):
            # Its length is what was written (its CRC holds): the file ends before the record does, as the
            # last record of a run still writing, or of a copy cut short. Nothing of that length is read.
            self.partial = True
            return None
        body = bytes(self.buf[self.pos + HEADER:self.pos + HEADER + length])
        (data_crc,) = _FOOTER.unpack_from(self.buf, self.pos + HEADER + length)
        if masked_crc32c(body) != data_crc:
            raise EventFileError("its data fails the CRC check")
        self.pos += HEADER + length + FOOTER
        return body
