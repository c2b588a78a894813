"""Marks for the tests that lay out a graph: igraph is the optional extra `graph` (`make test` installs it),
dot (graphviz-pure or Graphviz) is only the layout it was measured against. Without one, its tests are
skipped with the reason, never failed."""

from __future__ import annotations

import importlib.util

import pytest

from ckptview.core.graph.layout import INSTALL_HINT, dot_command

HAS_IGRAPH = importlib.util.find_spec("igraph") is not None

needs_igraph = pytest.mark.skipif(
    not HAS_IGRAPH, reason=f"igraph is not installed: the Graph view's layout is the extra `graph` ({INSTALL_HINT})")
needs_dot = pytest.mark.skipif(
    dot_command() is None, reason="no dot program (graphviz-pure or Graphviz): only the layout igraph is compared with")
