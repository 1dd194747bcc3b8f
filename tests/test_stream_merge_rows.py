"""Merging streams that hold their rows but have other leaf keys: leaves planned on the union.

Copies of one small (exact) model fed on their own rows each convert to
leaves planned on those rows (and hold them, ``StreamState.rows``), so their
leaf keys differ; so do the leaves of first ``partial_fit`` calls of different
batches.  Before, ``daskdepth.merge`` refused them ("other leaf keys").  Now,
when every model holds all its rows and the union stays within the row limit,
the union's leaves are planned on the union of the rows (sorted by their bits,
so that the result does not depend on the models' order or grouping), as a
stream that holds its rows plans them again.  A model that does not hold its
rows is still refused, with the reason.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import exact_depth

import daskdepth
from daskdepth.fitting.fit import pilot_sample_size

TOL = 1e-3

pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _small() -> daskdepth.AIIRW:
    x = np.random.default_rng(0).normal(size=(400, 3))
    return daskdepth.AIIRW(n_directions=12, tol=TOL, random_state=0).partial_fit(x)


def _state(model, points) -> tuple:
    return (model.score_samples(points).tobytes(), model.error_bound_, model.offset_,
            model.n_samples_fit_, model._sample_depth.tobytes(),
            None if model._stream.bounds is None else model._stream.bounds.tobytes())


def _site(small, batch):
    site = copy.deepcopy(small)
    site.partial_fit(batch)
    return site


def test_sites_with_their_own_leaves_merge_on_their_rows(tmp_path):
    small = _small()
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(3500, 3)), rng.normal(size=(4000, 3)) + 0.5]
    a, b = (_site(small, x) for x in batches)
    assert a._stream.rows is not None and b._stream.rows is not None
    assert not np.array_equal(a._stream.bounds, b._stream.bounds)  # other leaf keys
    merged = daskdepth.merge([a, b])
    union = np.concatenate([small.summary_.rows, batches[0], small.summary_.rows, batches[1]])
    assert merged.n_samples_fit_ == union.shape[0] and merged.n_batches_ == 4
    held = merged._stream.rows
    assert held.shape == union.shape
    order = np.lexsort(union.view(np.int64).T[::-1])
    np.testing.assert_array_equal(held, union[order])
    q = np.random.default_rng(2).normal(size=(80, 3))
    err = np.abs(merged.score_samples(q) - exact_depth(union, q, merged.location_,
                                                       merged.directions_))
    assert err.max() <= merged.error_bound_ + 1e-12 and merged.error_bound_ <= TOL
    loaded = daskdepth.load(merged.save(tmp_path / "m.zarr"))  # the held rows are stored
    np.testing.assert_array_equal(loaded._stream.rows, held)
    assert _state(loaded, q) == _state(merged, q)
    merged.partial_fit(rng.normal(size=(1000, 3)))  # and goes on as a stream holding its rows
    assert merged._stream.rows.shape[0] == union.shape[0] + 1000


@settings(max_examples=8, deadline=None)
@given(sizes=st.lists(st.integers(50, 3500), min_size=2, max_size=4), tied=st.booleans(),
       shift=st.floats(-2, 2), order=st.randoms(use_true_random=False))
def test_random_groupings_of_sites_holding_their_rows_give_the_same_bits(
        sizes, tied, shift, order):
    small = _small()
    rng = np.random.default_rng(len(sizes))
    batches = [rng.normal(size=(k, 3)) + shift * (i % 2) for i, k in enumerate(sizes)]
    if tied:
        batches = [np.round(b, 1) for b in batches]
    points = np.concatenate([np.random.default_rng(3).normal(size=(60, 3)), [[1e6, 0, 0]]])
    parts = [_site(small, b) for b in batches]
    every = _state(daskdepth.merge(parts), points)
    while len(parts) > 1:  # merge two random models at a time, in a random order
        i, j = sorted(order.sample(range(len(parts)), 2))
        merged = daskdepth.merge([parts[j], parts[i]] if order.random() < 0.5
                                 else [parts[i], parts[j]])
        parts = [p for k, p in enumerate(parts) if k not in (i, j)] + [merged]
    assert _state(parts[0], points) == every


def test_a_model_that_does_not_hold_its_rows_is_refused_with_the_reason():
    small = _small()
    rng = np.random.default_rng(4)
    a = _site(small, rng.normal(size=(3500, 3)))
    # fit's leaves on more rows than the row limit: the rows are not held
    big = rng.normal(size=(pilot_sample_size(3, TOL) + 10, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = copy.deepcopy(small)
        b.partial_fit(big)
    assert b._stream.rows is None
    with pytest.raises(ValueError, match=r"model 1 does not hold all its rows.*template"):
        daskdepth.merge([a, b])
