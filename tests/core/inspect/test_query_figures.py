"""Figure terms of the filter language (issue 35, finding 10): `nan>0`, `norm>10`, `absmax<0.5`, `alpha<2`.

Tensors are found by what their values say, as users of TensorBoard and Netron look for them. Each term
is checked against torch's own figures of the tensors `torch.load` returns (the spectra against
ckptview's spectrum, whose alpha is held to WeightWatcher's in tests/core/figures); a figure not computed
matches nothing; computing is a generator with progress and cancel (the window runs it in a worker).
"""

from __future__ import annotations

import math

import pytest
import torch

from ckptview import cli
from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled
from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.figure_terms import compute_figures
from ckptview.core.inspect.grouping import group_tree
from ckptview.core.inspect.query import QueryError, matching_names, parse_query
from ckptview.core.jobs import CancelToken, drain


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["2.weight"][3, 5] = math.nan
    state["big"] = torch.randn(40, 40) * 10
    state["heavy"] = torch.from_numpy(__import__("numpy").random.default_rng(0).standard_cauchy((120, 80))
                                      .astype("float32"))
    state["step"] = torch.tensor(7)
    path = tmp_path_factory.mktemp("query_figures") / "m.pt"
    torch.save(state, path)
    ck = open_checkpoint(str(path))
    yield ck, torch.load(path, weights_only=True), path
    ck.close()


def found(ck, text: str, analysis: Analysis | None = None) -> set[str]:
    query = parse_query(text)
    drain(compute_figures(query, [e.info for e in ck.tensors()], analysis or Analysis()))
    return matching_names(group_tree(ck.root), query)


def finite(t: torch.Tensor) -> torch.Tensor:
    t = t.double().reshape(-1)
    return t[torch.isfinite(t)]


@pytest.mark.parametrize(("text", "keep"), [
    ("nan>0", lambda t: bool(torch.isnan(t.double()).any())),
    ("nan=0", lambda t: not bool(torch.isnan(t.double()).any())),
    ("norm>10", lambda t: float(torch.linalg.vector_norm(finite(t))) > 10),
    ("l2<=1", lambda t: float(torch.linalg.vector_norm(finite(t))) <= 1),
    ("absmax<0.2", lambda t: float(finite(t).abs().max()) < 0.2),
    ("mean>0", lambda t: float(finite(t).mean()) > 0),
    ("std>=1", lambda t: finite(t).numel() > 1 and float(finite(t).std()) >= 1),
    ("max>5", lambda t: float(finite(t).max()) > 5),
    ("zeros>0", lambda t: bool((t == 0).any())),
])
def test_statistics_terms_keep_what_torch_computes(saved, text, keep):
    ck, ref, _path = saved
    assert found(ck, text) == {name for name, t in ref.items() if keep(t)}


def test_spectral_terms_and_words_together(saved):
    from ckptview.core.figures.spectral import matrix_of, spectrum

    ck, ref, _path = saved
    alphas = {e.name: spectrum(e.info).alpha for e in ck.tensors()
              if matrix_of(e.info) and bool(torch.isfinite(ref[e.name]).all())}  # NaN: no spectrum
    assert found(ck, "alpha<2") == {n for n, a in alphas.items() if a is not None and a < 2}
    assert "heavy" in found(ck, "alpha<2")  # a Cauchy matrix: the heaviest tail there is
    assert found(ck, "weight nan>0") == {"2.weight"}  # all words must match
    assert found(ck, "nan>0 norm>1000") == set()


def test_a_figure_not_computed_matches_nothing_and_bad_terms_say_so(saved):
    ck, _ref, _path = saved
    query = parse_query("nan>0")
    assert query.figures.wanted == {"nan"}
    assert matching_names(group_tree(ck.root), query) == set()
    for bad in ("norm>abc", "nan>", "alpha<<2"):
        with pytest.raises(QueryError, match="figure"):
            parse_query(bad)
    assert parse_query("normalize").figures.wanted == set()  # a name that starts like a figure is a name


def test_computing_reports_progress_reads_each_tensor_once_and_stops_on_cancel(saved):
    ck, _ref, _path = saved
    infos = [e.info for e in ck.tensors()]
    analysis = Analysis()
    query = parse_query("norm>1 nan>0")
    steps = list(_steps(compute_figures(query, infos, analysis)))
    assert steps[-1].done == steps[-1].total and "figures" in steps[-1].message
    assert analysis.passes == len(infos)
    drain(compute_figures(parse_query("absmax>1"), infos, analysis))
    assert analysis.passes == len(infos)  # the statistics of a tensor are read once, then kept
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        drain(compute_figures(parse_query("alpha<3"), infos, Analysis(), token))


def _steps(gen):
    while True:
        try:
            yield next(gen)
        except StopIteration:
            return


def test_info_filter_takes_figure_terms(saved, capsys):
    ck, ref, path = saved
    assert cli.main(["info", str(path), "--json", "--filter", "nan>0"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in data["tensors"]] == ["2.weight"]


def test_a_sort_term_orders_tensors_by_a_figure_as_torch_computes_it(saved):
    """`sort:-norm` (largest first), `sort:absmax` (smallest first): the order of torch's own figures; a
    tensor without the figure (a NaN's spectrum, an int's) last; a module placed by its first tensor."""
    from ckptview.core.inspect.query import row_order

    ck, ref, _path = saved
    top = group_tree(ck.root)
    rows = list(top.walk())
    for text, figure, descending in (("sort:-norm", lambda t: float(torch.linalg.vector_norm(finite(t))), True),
                                     ("sort:absmax", lambda t: float(finite(t).abs().max()), False),
                                     ("sort:+mean", lambda t: float(finite(t).mean()), False)):
        query = parse_query(text)
        assert query.empty and query.needs_figures  # it filters nothing
        drain(compute_figures(query, [e.info for e in ck.tensors()], Analysis()))
        placed = row_order(query, rows)
        tensors = [r for r in rows if r.node is not None and r.node.kind == "tensor"]
        ranked = [r.name for r in sorted(tensors, key=placed.key)]
        expected = sorted(ref, key=lambda n: figure(ref[n].double()) * (-1 if descending else 1))
        assert ranked == expected, text
    query = parse_query("sort:-nan")
    drain(compute_figures(query, [e.info for e in ck.tensors()], Analysis()))
    placed = row_order(query, rows)
    module = next(r for r in rows if r.name == "2")  # the module row above 2.weight (one NaN) and 2.bias
    assert placed.value(module) == 1.0 and placed.value(top) == 1.0
    query = parse_query("sort:alpha")  # the heaviest tail first; no spectrum for a vector or a NaN's matrix
    drain(compute_figures(query, [e.info for e in ck.tensors()], Analysis()))
    placed = row_order(query, rows)
    ranked = [r.name for r in sorted(rows, key=placed.key) if r.node is not None and r.node.kind == "tensor"]
    assert ranked[0] == "heavy" and set(ranked[-4:]) == {"2.weight", "0.bias", "2.bias", "step"}


def test_sort_terms_that_cannot_be_understood_say_so():
    from ckptview.core.inspect.query import row_order

    for bad in ("sort:", "sort:colour", "sort:--norm"):
        with pytest.raises(QueryError, match="sort"):
            parse_query(bad)
    with pytest.raises(QueryError, match="one sort"):
        parse_query("sort:norm sort:-nan")
    query = parse_query("weight sort:-absmax")
    assert not query.empty and query.order.words == "max |x|, largest first"
    assert row_order(parse_query("weight"), []) is None


def test_info_lists_tensors_in_the_order_of_a_sort_term(saved, capsys):
    import json

    ck, ref, path = saved
    assert cli.main(["info", str(path), "--json", "--filter", "sort:-absmax"]) == 0
    names = [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]]
    assert names == sorted(ref, key=lambda n: -float(finite(ref[n]).abs().max()))
    assert cli.main(["info", str(path), "--json", "--filter", "weight sort:-norm"]) == 0
    names = [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]]
    weights = [n for n in ref if "weight" in n]
    assert names == sorted(weights, key=lambda n: -float(torch.linalg.vector_norm(finite(ref[n]))))
    assert cli.main(["info", str(path), "--filter", "sort:-nan"]) == 0
    listing = capsys.readouterr().out
    assert listing.index("2.weight") < listing.index("0.weight")  # the readable table in that order too
