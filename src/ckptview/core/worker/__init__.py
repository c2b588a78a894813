"""The isolated worker process of a forward pass: the only place ckptview imports torch. It loads
only what the load gate checked, builds the model, runs it, and reports typed results on its stdout."""

__all__: list[str] = []  # the worker process's modules are run, not imported
