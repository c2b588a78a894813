"""A training run's checkpoints as a timeline: discovery, figures per step (serial, pool or Dask),
findings, the SQLite cache, live following."""
