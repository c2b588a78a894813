"""Lazy values: the bytes a tensor's view spans, read on demand; tensors assembled from shards; slices."""
