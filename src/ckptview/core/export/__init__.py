"""Export tensors to .npy, .npz or safetensors: planned from metadata, written in bounded blocks, atomically."""
