"""Other statistics over the directions from the same summaries: standard error and minimum.

Checked at ``tol=0`` against the independent oracle's per-direction depths, on
narrow rows (projected inline) and wide rows (projected beforehand), with ties.
"""

from __future__ import annotations

import numpy as np
import pytest

import daskdepth
from tests.oracle import direction_depths


@pytest.mark.parametrize("d", [3, 40])
def test_standard_error_and_minimum_match_the_per_direction_depths(d):
    rng = np.random.default_rng(d)
    x = np.round(rng.normal(size=(1500, d)), 1)  # ties along every direction
    model = daskdepth.IRW(n_directions=120, tol=0, random_state=0).fit(x)
    points = np.vstack([x[:40], rng.normal(size=(40, d)), [[np.nan] * d]])
    c = direction_depths(x, points[:-1], model.location_, model.directions_)
    summary = model.summary_
    depth, std = summary.depth_and_std(points)
    np.testing.assert_allclose(depth[:-1], c.mean(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(std[:-1], c.std(axis=1, ddof=1) / np.sqrt(c.shape[1]),
                               rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(depth[:-1], summary.depth(points)[:-1])
    np.testing.assert_allclose(summary.min_depth(points)[:-1], c.min(axis=1), rtol=0,
                               atol=1e-15)
    assert np.isnan(depth[-1]) and np.isnan(std[-1])
    assert np.isnan(summary.min_depth(points)[-1])


def test_standard_error_is_zero_for_one_direction_and_for_a_point_far_away():
    x = np.random.default_rng(1).normal(size=(500, 2))
    one = daskdepth.IRW(n_directions=1, tol=0, random_state=0).fit(x).summary_
    assert (one.depth_and_std(x[:5])[1] == 0).all()
    many = daskdepth.IRW(n_directions=50, tol=0, random_state=0).fit(x).summary_
    depth, std = many.depth_and_std(np.array([[1e6, 1e6]]))
    assert depth[0] == 0 and std[0] == 0
