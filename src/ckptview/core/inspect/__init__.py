"""What a checkpoint means: module grouping, the filter language, size facts, training state,
optimizer state mapped to parameter names, tensor roles."""
