"""A stream that starts small keeps its summary exact until ``fit`` would stop keeping one.

Before, the second ``partial_fit`` of a model whose first batch was small
(sorted projections) converted that summary to leaves at the leaf limit of the
first batch (one value per leaf at 5,000 rows and tol=1e-4): later rows of the
same distribution piled up in those leaves, the bound passed 2 x tol at the
second batch and a warning named drift that was not there.  Now the batches'
rows are added to the exact summary while the rows held stay within the size
at which ``fit`` keeps one (error bound 0, the exact depths of the union), and
only past it the summary is converted, once, to leaves planned on all the rows
held.
"""

from __future__ import annotations

import copy
import itertools
import warnings

import numpy as np
import pytest
from oracle import exact_depth, exact_halfspace_depth

import daskdepth
from daskdepth.fitting.fit import pilot_sample_size
from daskdepth.runtime.memory import prefer_sorted


def stays_exact(n: int, d: int, m: int, tol: float) -> bool:
    """fit's rule for an exact summary: every row in its sample, sorted projections smaller."""
    return n <= pilot_sample_size(d, tol) and prefer_sorted(m, n, tol)


def _oracle(model, reference: np.ndarray, points: np.ndarray) -> np.ndarray:
    fn = exact_halfspace_depth if isinstance(model, daskdepth.Halfspace) else exact_depth
    return fn(reference, points, model.location_, model.directions_)


def _exact_limit(model) -> bool:
    return stays_exact(int(model.n_samples_fit_), int(model.n_features_in_),
                       int(model.n_directions_), float(model.tol))


def test_stationary_stream_from_a_small_first_batch_keeps_its_bound():
    """The example of the report: no warning, exact while small, <= 2 x tol after 20 batches."""
    rng = np.random.default_rng(0)
    points = rng.normal(size=(300, 5))
    model = daskdepth.AIIRW(n_directions=50, random_state=0)  # tol=1e-4
    held, conversions, bounds = [], 0, None
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.StreamBoundWarning)
        for _ in range(20):
            batch = rng.normal(size=(5000, 5))
            held.append(batch)
            model.partial_fit(batch)
            st = model._stream
            if st.bounds is None:  # still exact
                assert _exact_limit(model)
                assert all(type(b).__name__ == "BlockSorted" for b in model.summary_.blocks)
                assert model.error_bound_ == 0.0
                np.testing.assert_allclose(model.score_samples(points),
                                           _oracle(model, np.concatenate(held), points),
                                           rtol=0, atol=1e-12)
            else:
                if bounds is None:
                    conversions += 1
                    bounds = st.bounds.copy()
                    # converted at the first batch that took it past the exact size
                    assert not stays_exact(model.n_samples_fit_, 5, 50, model.tol)
                    assert stays_exact(model.n_samples_fit_ - 5000, 5, 50, model.tol)
                if st.rows is None:  # the leaf keys stay, unless planned again on held rows
                    np.testing.assert_array_equal(st.bounds, bounds)
                else:  # the stream holds every row since its conversion (within 16 / tol)
                    assert st.rows.shape == (model.n_samples_fit_, 5)
                    bounds = st.bounds.copy()
                assert model.error_bound_ <= 2 * model.tol
    assert conversions == 1
    assert model.n_samples_fit_ == 100_000 and model.n_batches_ == 20
    err = np.abs(model.score_samples(points) - _oracle(model, np.concatenate(held), points))
    assert err.max() <= model.error_bound_ + 1e-12


@pytest.mark.parametrize("cls", [daskdepth.IRW, daskdepth.Halfspace, daskdepth.AIIRW])
def test_exact_while_small_then_converted_once(cls):
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(400, 3)) for _ in range(14)]
    points = np.concatenate([rng.normal(size=(100, 3)), rng.normal(size=(5, 3)) * 10])
    model = cls(n_directions=20, tol=1e-3, random_state=0)
    seen = []
    converted_at = None
    with warnings.catch_warnings():
        warnings.simplefilter("error", daskdepth.StreamBoundWarning)
        for i, batch in enumerate(batches):
            model.partial_fit(batch)
            seen.append(batch)
            union = np.concatenate(seen)
            if model._stream.bounds is None:
                assert converted_at is None and model.error_bound_ == 0.0
                np.testing.assert_allclose(model.score_samples(points),
                                           _oracle(model, union, points), rtol=0, atol=1e-12)
            else:
                converted_at = i if converted_at is None else converted_at
                err = np.abs(model.score_samples(points) - _oracle(model, union, points))
                assert err.max() <= model.error_bound_ + 1e-12
                assert model.error_bound_ <= 2 * model.tol
    assert converted_at is not None and converted_at >= 2  # several batches exact first


def test_the_order_of_later_batches_does_not_change_the_bits():
    rng = np.random.default_rng(2)
    first = rng.normal(size=(300, 3))
    later = [rng.normal(size=(200 + 10 * i, 3)) for i in range(3)]
    points = rng.normal(size=(50, 3))
    out = set()
    for order in itertools.permutations(range(3)):
        model = daskdepth.AIIRW(n_directions=30, tol=1e-3, random_state=0).partial_fit(first)
        for i in order:
            model.partial_fit(later[i])
        assert model._stream.bounds is None
        out.add((model.score_samples(points).tobytes(), model.offset_, model.error_bound_))
    assert len(out) == 1


@pytest.mark.parametrize("rows", [150, 900])  # the union exact, or past the exact size
def test_merge_of_exact_streams_is_order_free(rows):
    rng = np.random.default_rng(3)
    base = daskdepth.IRW(n_directions=16, tol=1e-3, random_state=0).fit(rng.normal(size=(200, 2)))
    batches = [rng.normal(size=(rows, 2)) for _ in range(3)]
    parts = [copy.deepcopy(base).partial_fit(b) for b in batches]
    assert all(p._stream.bounds is None for p in parts)
    points = rng.normal(size=(60, 2))
    results = set()
    for order in itertools.permutations(range(3)):
        a = daskdepth.merge([daskdepth.merge([parts[order[0]], parts[order[1]]]),
                             parts[order[2]]])
        b = daskdepth.merge([parts[i] for i in order])
        for merged in (a, b):
            results.add((merged.score_samples(points).tobytes(), merged.error_bound_,
                         merged.offset_, merged.n_samples_fit_))
    assert len(results) == 1
    merged = daskdepth.merge(parts)
    # each part holds the base's rows: the union holds them three times
    union = np.concatenate([base.summary_.rows] * 3 + batches)
    err = np.abs(merged.score_samples(points) - _oracle(merged, union, points))
    assert err.max() <= merged.error_bound_ + 1e-12
    if _exact_limit(merged):
        assert merged._stream.bounds is None and merged.error_bound_ == 0.0
    else:
        assert merged._stream.bounds is not None and merged.error_bound_ <= 2 * merged.tol
        merged.partial_fit(rng.normal(size=(100, 2)))  # and goes on as a leaf stream


@pytest.mark.parametrize("rows", [200, 1200])  # stays exact, or converted with its history
def test_window_drops_the_oldest_batch_of_an_exact_stream(rows):
    rng = np.random.default_rng(4)
    batches = [rng.normal(size=(rows, 3)) + 0.1 * i for i in range(6)]
    points = rng.normal(size=(80, 3))
    model = daskdepth.IRW(n_directions=20, tol=1e-3, random_state=0, window=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        for i, batch in enumerate(batches):
            model.partial_fit(batch)
            kept = np.concatenate(batches[max(0, i - 2):i + 1])
            assert model.n_samples_fit_ == kept.shape[0]
            err = np.abs(model.score_samples(points) - _oracle(model, kept, points))
            assert err.max() <= model.error_bound_ + 1e-12
            if model._stream.bounds is None:
                assert model.error_bound_ == 0.0 and err.max() <= 1e-12
    assert (model._stream.bounds is None) == (rows == 200)


@pytest.mark.parametrize("window", [None, 3])
def test_saved_mid_exact_stream_goes_on_with_the_same_bits(tmp_path, window):
    rng = np.random.default_rng(5)
    batches = [rng.normal(size=(300, 3)) for _ in range(12)]
    points = np.concatenate([rng.normal(size=(60, 3)), np.full((1, 3), 1e6)])
    model = daskdepth.AIIRW(n_directions=24, tol=1e-3, random_state=0, window=window)
    for batch in batches[:3]:
        model.partial_fit(batch)
    assert model._stream.bounds is None and model.error_bound_ == 0.0
    loaded = daskdepth.load(model.save(tmp_path / "m.zarr"))

    def state(m):
        return (m.score_samples(points).tobytes(), m.error_bound_, m.offset_,
                m.n_samples_fit_, m.batch_rows_.tolist(), m._sample_depth.tobytes())

    assert state(loaded) == state(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        for batch in batches[3:]:
            model.partial_fit(batch)
            loaded.partial_fit(batch)
            assert state(loaded) == state(model)
    if window is None:
        assert model._stream.bounds is not None  # converted on the way
