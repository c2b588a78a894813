"""The comparison tab: two checkpoints side by side, their differences as a table and overlays."""
