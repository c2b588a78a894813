"""Writing tensors out: .npy/.npz/safetensors exporters with safe names and atomic writes."""
