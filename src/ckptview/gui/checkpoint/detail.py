"""The detail panel: everything the core knows about the selected row, as rich text with links."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QUrl, Signal
from PySide6.QtWidgets import QTextBrowser, QWidget

from ckptview.core.checkpoint import Checkpoint, TensorInfo
from ckptview.core.inspect.grouping import Row
from ckptview.core.read.values.repeats import repeats
from ckptview.core.text import shown
from ckptview.core.units import count_text, human_bytes, plural, shape_text
from ckptview.gui.base.palette import color, on_palette_change

LINK_SCHEME = "tensor"
REPR_LIMIT = 200_000  # characters of a value shown in full; beyond that the text says how much was cut


def _esc(value: Any) -> str:
    return html.escape(shown(value))  # text from the file: bounded, no bidi override, no control character


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td class='k'>{_esc(k)}</td><td>{v}</td></tr>" for k, v in rows)
    return f"<table cellspacing='0' cellpadding='3'>{cells}</table>"


def _css() -> str:
    """The panel's style in the palette in use (captions and notes muted, a broken entry in the error colour)."""
    muted, error = color("muted").name(), color("error").name()
    return f"""<style>
td.k {{ color: {muted}; padding-right: 14px; white-space: nowrap; }}
h3 {{ margin-bottom: 2px; }} .broken {{ color: {error}; font-weight: bold; }} .note {{ color: {muted}; }}
pre {{ white-space: pre-wrap; }}
</style>"""


class DetailPanel(QTextBrowser):
    """Shows the selected row; `tensor_link_activated(name)` when a sharing link is clicked."""

    tensor_link_activated = Signal(str)

    def __init__(self, checkpoint: Checkpoint, sharing: Mapping[str, list[str]] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checkpoint = checkpoint
        self._sharing = sharing
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._on_anchor)
        self.setObjectName("detailPanel")
        self._row: Row | None = None
        on_palette_change(self, lambda _theme: self.show_row(self._row))

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == LINK_SCHEME:
            self.tensor_link_activated.emit(url.path() or url.toString()[len(LINK_SCHEME) + 1:])

    def sharing(self) -> Mapping[str, list[str]]:
        """name -> other tensors over the same storage (computed on first use)."""
        if self._sharing is None:
            self._sharing = self.checkpoint.sharing()
        return self._sharing

    def show_row(self, row: Row | None) -> None:
        """Describe `row` (None: a hint)."""
        self._row = row
        if row is None:
            self.setHtml(_css() + "<p class='note'>Select a tensor or value to see its details.</p>")
            return
        node = row.node
        title = f"<h3>{_esc(row.name or '(root)')}</h3>"
        if node is not None and node.kind == "tensor" and node.tensor is not None:
            body = self._tensor_html(row.name, node.tensor, row.params > 0)
        elif node is not None and node.kind == "value":
            text = repr(node.value) if not isinstance(node.value, str) else node.value
            cut = ""
            if len(text) > REPR_LIMIT:
                cut = f"<p>(first {REPR_LIMIT:,} of {len(text):,} characters)</p>"
                text = text[:REPR_LIMIT]
            lines = "\n".join(map(_esc, text.split("\n")))  # a text keeps its lines, nothing else raw
            body = _table([("Type", _esc(node.type_name or type(node.value).__name__))]) + \
                f"<pre>{lines}</pre>{cut}"
        else:
            kind = "module group" if node is None else (node.type_name or node.kind)
            rows = [("Kind", _esc(kind))]
            if node is not None:
                rows.append(("Items", f"{len(node.children):,}"))
            rows += [("Tensors", f"{row.tensors:,}"), ("Elements", f"{row.numel:,}"),
                     ("Parameters", f"{row.params:,}"),
                     ("Size", f"{human_bytes(row.nbytes)} ({row.nbytes:,} bytes)")]
            body = _table(rows)
        self.setHtml(_css() + title + body)

    def _tensor_html(self, name: str, info: TensorInfo, parameter: bool = False) -> str:
        """`parameter`: the tensor is one of the model's parameters (as the tree's Parameters column counts)."""
        storage = info.storage
        saved_as = " <span class='note'>(saved as torch.nn.Parameter)</span>" if info.is_parameter else ""
        rows = [
            ("Shape", f"{_esc(shape_text(info.shape))} &nbsp; <span class='note'>{_esc(list(info.shape))}</span>"),
            ("Stride", _esc(list(info.stride))),
            ("Dtype", _esc(info.dtype)),
            ("Elements", f"{info.numel:,}" + (f" ({count_text(info.numel)})" if info.numel >= 10_000_000 else "")),
            ("Size", f"{human_bytes(info.nbytes)} ({info.nbytes:,} bytes)"),
            ("Saved device", _esc(info.device)),
            ("Contiguous", "yes" if info.is_contiguous else "no"),
            ("Requires grad", "yes" if info.requires_grad else "no"),
            ("Parameter", ("yes" if parameter else "no") + saved_as),
        ]
        if info.layout != "strided":
            rows.append(("Layout", _esc(info.layout)))
        quant = info.quant
        if quant is not None:  # a quantized weight: what it is made of; its values are the dequantized weight's
            rows[3] = ("Elements", f"{plural(info.numel, 'parameter')} ({count_text(info.numel)})")
            rows[4] = ("Stored", f"{human_bytes(info.nbytes)} in its parts ({info.nbytes:,} bytes, "
                                 f"{info.nbytes / max(info.numel, 1):.3g} bytes per parameter)")
            rows.insert(0, ("Quantized", f"{_esc(quant.label)}, {quant.bits_per_weight:g} bits per weight"
                            + (f"; the model's dtype {_esc(quant.dtype)}" if quant.dtype else "")))
            links = "<br>".join(f"{_esc(role)}: <a href='{LINK_SCHEME}:{html.escape(part)}'>{_esc(part)}</a>"
                                for role, part in quant.parts)
            rows.append(("Parts", links))
            rows.append(("Values", "<span class='note'>dequantized from its parts, as the scheme's library computes "
                         "them (float32); the parts beneath keep their raw values</span>"))
        if info.part_of is not None:
            rows.insert(0, ("Part of", f"<a href='{LINK_SCHEME}:{html.escape(info.part_of)}'>{_esc(info.part_of)}</a> "
                            "<span class='note'>(stored values, as the file holds them)</span>"))
        if storage is not None:
            rows += [
                ("Storage key", _esc(storage.key)),
                ("Storage", f"{storage.numel:,} × {_esc(storage.dtype)} = {human_bytes(storage.nbytes)}"),
                ("Storage offset", f"{plural(info.offset, 'element')}"),
            ]
            if storage.source is not None:
                rows.append(("Bytes in", _esc(storage.source.describe())))
        for key, value in info.extra.items():
            rows.append((str(key), _esc(value)))
        found = repeats(info)
        if found is not None:  # the size above is what the view declares; the file stores less
            rows.append(("Repeats storage", f"<span class='broken'>{_esc(found.describe(info.dtype))}</span><br>"
                         "statistics, histograms and heat-maps are of its stored elements; spectra and exports "
                         "only when asked for the expanded tensor"))
        broken = info.broken or (storage.broken if storage is not None else None)
        if broken:
            rows.append(("Broken", f"<span class='broken'>{_esc(broken)}</span>"))
        others = self.sharing().get(name, [])
        if others:
            links = "<br>".join(f"<a href='{LINK_SCHEME}:{html.escape(o)}'>{_esc(o)}</a>" for o in others[:200])
            more = f"<br>… and {len(others) - 200:,} more" if len(others) > 200 else ""
            rows.append(("Shares storage with", links + more))
        return _table(rows)
