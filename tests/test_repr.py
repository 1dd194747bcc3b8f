"""The estimators' HTML representation in Jupyter.

scikit-learn's diagram (parameters, fitted attributes) is kept, and a short
summary follows: depth, covariance kind and, when fitted, n, d, m and the
error bound, from attributes already computed -- displaying a model never
starts Dask work.
"""

from __future__ import annotations

import re

import dask
import numpy as np
import pytest
import sklearn
from conftest import DISTRIBUTED_ROWS, chunked, gaussian_data
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import daskdepth
from daskdepth.summary.depth import DepthSummary


def _summary_rows(html: str) -> dict[str, str]:
    block = html[html.index('class="daskdepth-summary"'):]
    return dict(re.findall(r"<th[^>]*>([^<]*)</th><td[^>]*>([^<]*)</td>", block))


def _forbid_computation(*args, **kwargs):
    raise AssertionError("displaying the model started a Dask computation")


def test_unfitted_repr_shows_parameters():
    model = daskdepth.AIIRW(n_directions=7, tol=1e-3)
    html = model._repr_html_()
    assert "sk-top-container" in html  # scikit-learn's diagram is still there
    assert "n_directions" in html and "0.001" in html
    rows = _summary_rows(html)
    assert rows == {"depth": "AI-IRW", "covariance": "sample", "status": "not fitted"}
    bundle = model._repr_mimebundle_()
    assert bundle["text/plain"] == repr(model)
    assert _summary_rows(bundle["text/html"]) == rows
    # The summary sits inside the diagram's document, before its end.
    assert html.rstrip().endswith("</body>")


def test_fitted_repr_shows_n_d_m_error_bound_and_covariance(tmp_path):
    x = gaussian_data(1500, 3, seed=1)
    model = daskdepth.AIIRW(n_directions=12, tol=1e-3, random_state=0).fit(x)
    rows = _summary_rows(model._repr_html_())
    assert rows["n (reference rows)"] == "1,500"
    assert rows["d (features)"] == "3"
    assert rows["m (directions)"] == "12"
    assert rows["error bound"] == f"{model.error_bound_:.3g} (tol 0.001)"
    assert rows["covariance"] == "sample"
    assert rows["leaf passes (after moments)"] == "0"
    assert "offset" in rows
    # A saved and loaded model shows the same summary.
    loaded = daskdepth.load(model.save(tmp_path / "model.zarr"))
    assert _summary_rows(loaded._repr_html_()) == rows


@pytest.mark.parametrize("model, kind", [
    (daskdepth.IRW(), "none (IRW does not whiten)"),
    (daskdepth.AIIRW(covariance="ledoit-wolf"), "ledoit-wolf"),
    (daskdepth.AIIRW(covariance=np.eye(2)), "precomputed 2 x 2"),
])
def test_covariance_kind(model, kind):
    assert _summary_rows(model._repr_html_())["covariance"] == kind


def test_repr_of_a_distributed_fit_computes_nothing(monkeypatch):
    x = chunked(gaussian_data(DISTRIBUTED_ROWS, 2, seed=3), 20_000)
    with dask.config.set(scheduler="sync"):
        model = daskdepth.IRW(n_directions=6, tol=1e-3, random_state=0).fit(x)
    assert model.n_passes_ >= 1
    # Any Dask computation, or a call into the summary, fails from here on.
    monkeypatch.setattr(DepthSummary, "error_bound", _forbid_computation)
    monkeypatch.setattr(DepthSummary, "depth", _forbid_computation)
    with dask.config.set(scheduler=_forbid_computation):
        html = model._repr_html_()
        bundle = model._repr_mimebundle_()
        text = repr(model)
    rows = _summary_rows(html)
    assert rows["n (reference rows)"] == f"{DISTRIBUTED_ROWS:,}"
    assert rows["m (directions)"] == "6"
    assert rows["leaf passes (after moments)"] == str(model.n_passes_)
    assert _summary_rows(bundle["text/html"]) == rows
    assert text.startswith("IRW(")


def test_text_display_keeps_scikit_learn_behaviour():
    model = daskdepth.AIIRW()
    with sklearn.config_context(display="text"):
        assert not hasattr(model, "_repr_html_")
        assert "text/html" not in model._repr_mimebundle_()


def test_pipeline_diagram_still_renders():
    pipe = make_pipeline(StandardScaler(), daskdepth.AIIRW(n_directions=5))
    html = pipe._repr_html_()
    assert "AIIRW" in html and "StandardScaler" in html


@pytest.mark.parametrize("cls, distributed", [(daskdepth.AIIRW, False), (daskdepth.IRW, True),
                                              (daskdepth.HalfspaceMass, False)])
def test_summary_repr_is_one_short_line(cls, distributed, tmp_path):
    """The fitted summary's display (``model.summary_`` in a notebook) is a readable line, not
    every array cut to a tail such as ``...], n=1000000)`` (issue 25, B6)."""
    x = gaussian_data(DISTRIBUTED_ROWS if distributed else 1000, 2, seed=3)
    with dask.config.set(scheduler="sync"):
        model = cls(n_directions=30, random_state=0).fit(chunked(x, 20_000) if distributed else x)
    for summary in (model.summary_, daskdepth.load(model.save(tmp_path / "m.zarr")).summary_):
        text = repr(summary)
        assert "\n" not in text and len(text) < 120, text
        n = f"{x.shape[0]:,}"
        if cls is daskdepth.HalfspaceMass:
            assert re.fullmatch(rf"<MassSummary: n={n} rows, d=2, 30 half-spaces, "
                                r"[\d.,]+ (bytes|KiB|MiB)>", text), text
        else:
            kind = "leaves" if distributed else "sorted"
            assert re.fullmatch(rf"<DepthSummary: n={n} rows, d=2, 30 directions in \d+ blocks? "
                                rf"\(\d+ ({kind}|stored)\), [\d.,]+ (bytes|KiB|MiB)>", text), text
        pretty = pytest.importorskip("IPython.lib.pretty")
        assert pretty.pretty(summary) == text
    # scikit-learn's table of fitted attributes cuts values to 30 characters: the summary's
    # row holds a description that fits, not a cut repr
    html = model._repr_html_()
    row = html[html.index(">summary_<"):]
    row = row[:row.index("</tr>")]
    assert f"n={x.shape[0]:,}, m=30</td>" in row, row
    assert "..." not in row and "DepthSummary(" not in row
