"""Reading checkpoints: format readers (a registry picks by magic bytes), the safe pickle VM, the byte layer every value read goes through, and lazy values."""
