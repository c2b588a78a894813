"""What a window or a command holds open: the workspace of shared checkpoints, opening in a worker,
checks of a path before it is opened."""
