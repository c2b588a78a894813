"""The PySide6 window: a thin layer over `ckptview.core`; its panels and menu items are listed in `gui/app/main_window.py`."""

__all__: list[str] = []  # the subpackages are the API
