"""The export dialog."""
