"""ckptview: browse PyTorch checkpoints without executing them."""

__version__ = "0.1.0"
__all__ = ["__version__"]
