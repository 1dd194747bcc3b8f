"""The MCD in AI-IRW's invariant frame: affine invariance under ill-conditioned maps,
the same location bits for NumPy and dask input, and exact fits named as such."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from conftest import ODDS, chunked, gaussian_data
from scipy.stats import kendalltau, special_ortho_group

import daskdepth
from daskdepth.covariance import mcd as mcd_module

HAS_BREASTW = os.path.exists(f"{ODDS}/breastw.npz")


def _conditioned(rng: np.random.Generator, d: int, cond: float) -> np.ndarray:
    """A random ``d x d`` map with singular values log-spaced from 1 to ``cond``."""
    q1 = special_ortho_group.rvs(d, random_state=rng)
    q2 = special_ortho_group.rvs(d, random_state=rng)
    return q1 @ np.diag(np.logspace(0, np.log10(cond), d)) @ q2


def _data(name: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if name == "gaussian":
        return rng.normal(size=(1500, 8))
    if name == "t":
        return rng.standard_t(3, size=(1500, 6))
    return np.load(f"{ODDS}/{name}.npz")["X"].astype(np.float64)


def _fit(x, **kw) -> daskdepth.AIIRW:
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.CovarianceRankWarning)
        return daskdepth.AIIRW(frame="invariant", covariance="mcd", n_directions=100,
                               random_state=0, **kw).fit(x)


@pytest.mark.parametrize("name", [
    "gaussian", "t",
    pytest.param("breastw", marks=pytest.mark.skipif(not HAS_BREASTW,
                                                     reason="shared ODDS data not available")),
])
@pytest.mark.parametrize("kind", ["numpy", "dask", "dask-distributed"])
def test_mcd_invariant_frame_survives_an_ill_conditioned_map(name, kind, monkeypatch):
    """AI-IRW with the MCD in the invariant frame ranks X and X A + b alike for a map of
    condition 1e6.  The MCD used to run in the input's coordinates, where its exact-fit
    and determinant thresholds saw the map's conditioning: tau 0.81 (Gaussian), 0.92 (t),
    0.69 (breastw, which also lost a rank); it now runs in coordinates whitened by the
    rows' own R factor, and tau is 1 to six digits (also to cond 1e8).  'dask-distributed'
    runs its C-steps as passes over the chunks (a small in-memory sample)."""
    if kind == "dask-distributed":
        monkeypatch.setattr(mcd_module, "MCD_SAMPLE_ROWS", 400)
        monkeypatch.setattr(mcd_module, "MCD_SAMPLE_MIN", 100)
    x = _data(name)
    rng = np.random.default_rng(1)
    y = x @ _conditioned(rng, x.shape[1], 1e6) + 10 * rng.normal(size=x.shape[1])
    as_input = (lambda a: a) if kind == "numpy" else (lambda a: chunked(a, 257))
    mx, my = _fit(as_input(x)), _fit(as_input(y))
    assert mx.covariance_rank_ == my.covariance_rank_ == x.shape[1]
    assert kendalltau(mx.score_samples(x), my.score_samples(y))[0] >= 0.999


@pytest.mark.parametrize("frame", ["correlation", "invariant"])
def test_mcd_location_has_the_same_bits_for_numpy_and_dask_input(frame, monkeypatch):
    """The reweighted location is the mean of the kept rows from compensated sums, so its
    bits do not depend on the chunking; the chunked merges of the moments (the old
    location) differed in the last bits, and points one ulp from a row could get
    different depths.  The C-steps run over the chunks (a small in-memory sample)."""
    monkeypatch.setattr(mcd_module, "MCD_SAMPLE_ROWS", 500)
    monkeypatch.setattr(mcd_module, "MCD_SAMPLE_MIN", 100)
    x = gaussian_data(6000, 6, seed=2)
    kw = dict(covariance="mcd", frame=frame, n_directions=50, random_state=0)
    ref = daskdepth.AIIRW(**kw).fit(x)
    near = np.nextafter(x[:300], np.inf)
    for rows in (1000, 611, (7, 2993, 3000)):
        model = daskdepth.AIIRW(**kw).fit(chunked(x, rows))
        assert np.array_equal(model.location_, ref.location_), rows
        assert np.array_equal(model.score_samples(near), ref.score_samples(near)), rows


@pytest.mark.parametrize("d", [2, 20])
def test_mcd_exact_fit_is_named_at_any_dimension(d):
    """505 of 1000 rows identical: the MCD keeps only them, an exact fit.  At d = 2 the raw
    support (h = 502) is all those rows; at d = 20 (h = 511) it has six more, and the
    reweighting keeps the identical rows alone, which used to surface as a float64
    underflow with advice to rescale the features.  Both name the exact fit and its fix,
    and the fix works (at d = 20, 0.75 still leaves too few other rows after the
    reweighting, hence the advice of 0.9)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, d))
    x[:505] = rng.normal(size=d)
    with pytest.raises(ValueError, match="exact fit") as err:
        daskdepth.AIIRW(covariance="mcd", n_directions=20, random_state=0).fit(x)
    message = str(err.value)
    assert "support_fraction" in message and "underflow" not in message
    assert "rescale" not in message
    if d == 20:
        assert "505 rows repeat one value" in message and "e.g. 0.9" in message
    model = daskdepth.AIIRW(covariance="mcd", support_fraction=0.9, n_directions=20,
                            random_state=0).fit(x)
    assert model.covariance_rank_ == d


@pytest.mark.parametrize("name", ["gaussian", "t"])
def test_mcd_of_the_default_frame_is_equivariant_under_an_ill_conditioned_map(name):
    """The MCD estimate itself (default frame, whose depths are not affine invariant) maps
    with the data: the location of X A + b is that of X mapped, to 1e-6 of its spread.
    In the input's coordinates the C-steps saw a map of condition 1e6 (a correlation
    condition number of about 5e11): the location was off by 9e-3 (Gaussian) and 2.2e-2
    (t) standard deviations, now 3e-12 and 7e-13: where the correlation matrix's
    condition number exceeds MCD_WHITEN_COND the MCD runs in whitened coordinates in
    every frame."""
    x = _data(name)
    rng = np.random.default_rng(1)
    a = _conditioned(rng, x.shape[1], 1e6)
    b = 10 * rng.normal(size=x.shape[1])
    kw = dict(covariance="mcd", n_directions=10, random_state=0)
    mx = daskdepth.AIIRW(**kw).fit(x)
    my = daskdepth.AIIRW(**kw).fit(x @ a + b)
    whiten = np.linalg.inv(np.linalg.cholesky(mx.covariance_))
    mapped = np.linalg.solve(a.T, my.location_ - b)
    assert np.abs(whiten @ (mapped - mx.location_)).max() < 1e-6
