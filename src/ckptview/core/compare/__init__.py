"""Comparing two checkpoints: tensors aligned by name, figures of their differences, sections."""
