"""Widgets and helpers every feature's view uses: jobs off the GUI thread, settings, plots, tables, eliding."""
