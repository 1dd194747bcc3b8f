"""``daskdepth.template`` and ``daskdepth.merge``: models started from one frame combine exactly.

Counts are exact integers and extremes merge by min / max, so any grouping
and order of the same batches gives the same bits, and the same bits as
counting every batch into one model.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import exact_depth

import daskdepth
from daskdepth.summary.streaming import base_keys, leaf_totals, stream_block, to_base

TOL = 0.02

# the batches below move away from the reference on purpose: the bound grows (said once)
pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _batches(k: int = 4, rows: int = 500, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(rows, 3)) * (1 + 0.3 * b) + 0.2 * b for b in range(k)]


@pytest.fixture(scope="module")
def reference() -> daskdepth.AIIRW:
    x = np.random.default_rng(42).normal(size=(3000, 3))
    return daskdepth.AIIRW(n_directions=24, tol=TOL, random_state=0).fit(x)


@pytest.fixture(scope="module")
def points() -> np.ndarray:
    rng = np.random.default_rng(43)
    return np.concatenate([rng.normal(size=(200, 3)) * 2, [[1e6, 0, 0], [-1e6, 5, 5]]])


def _fed(start, batches):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        model = daskdepth.template(start)
        for b in batches:
            model.partial_fit(b)
        return model


def _state(model, points):
    return (model.score_samples(points).tobytes(), model.error_bound_, model.offset_,
            model.n_samples_fit_, model._sample_depth.tobytes())


def test_template_keeps_the_frame_and_holds_no_rows(reference, points):
    start = daskdepth.template(reference)
    assert start.n_samples_fit_ == 0 and start.n_batches_ == 0 and start.error_bound_ == 0.0
    for attr in ("location_", "covariance_", "directions_", "basis_"):
        np.testing.assert_array_equal(getattr(start, attr), getattr(reference, attr))
    assert reference.n_samples_fit_ == 3000 and "_stream" not in reference.__dict__
    with pytest.raises(ValueError, match="holds no rows yet.*partial_fit"):
        start.score_samples(points)
    with pytest.raises(ValueError, match="holds no rows yet"):
        start.predict(points)


def test_template_fed_gives_the_exact_depth_of_its_rows_within_the_bound(reference, points):
    batches = _batches()
    model = _fed(reference, batches)
    union = np.concatenate(batches)
    exact = exact_depth(union, points, model.location_, model.directions_)
    assert np.abs(model.score_samples(points) - exact).max() <= model.error_bound_ + 1e-12
    assert model.n_batches_ == 4 and model.n_samples_fit_ == 2000


def test_any_grouping_and_order_gives_the_same_bits(reference, points):
    batches = _batches()
    start = daskdepth.template(reference)
    single = [_fed(start, [b]) for b in batches]
    one_stream = _state(_fed(start, batches), points)
    merge = daskdepth.merge
    groupings = [
        merge(single),
        merge(single[::-1]),
        merge([merge(single[:2]), merge(single[2:])]),
        merge([merge([single[3], merge([single[1], single[0]])]), single[2]]),
        merge([_fed(start, batches[:3]), single[3]]),
        merge([_fed(start, batches[2:]), _fed(start, batches[:2])]),
    ]
    for got in groupings:
        assert _state(got, points) == one_stream
    for perm in itertools.permutations(range(4)):
        assert _state(merge([single[i] for i in perm]), points) == one_stream
    assert groupings[0].batch_rows_.tolist() == [500] * 4 and groupings[0].n_batches_ == 4


def test_merged_model_takes_more_batches(reference, points):
    batches = _batches(5)
    start = daskdepth.template(reference)
    merged = daskdepth.merge([_fed(start, batches[:2]), _fed(start, batches[2:4])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", daskdepth.StreamBoundWarning)
        merged.partial_fit(batches[4])
    assert _state(merged, points) == _state(_fed(start, batches), points)


def test_refusals_name_what_differs(reference):
    batches = _batches(2)
    start = daskdepth.template(reference)
    a = _fed(start, batches[:1])
    with pytest.raises(TypeError, match="only models of one depth"):
        other = daskdepth.IRW(n_directions=24, tol=TOL, random_state=0).partial_fit(batches[1])
        daskdepth.merge([a, other])
    with pytest.raises(ValueError, match="tol="):
        daskdepth.merge([a, daskdepth.AIIRW(n_directions=24, tol=0.03,
                                            random_state=0).partial_fit(batches[1])])
    with pytest.raises(ValueError, match=r"another location .*template"):
        b = daskdepth.AIIRW(n_directions=24, tol=TOL, random_state=0).partial_fit(
            batches[1] + 1.0)
        daskdepth.merge([a, b])
    other_dirs = daskdepth.template(daskdepth.AIIRW(n_directions=24, tol=TOL, random_state=0,
                                                    covariance=reference.covariance_).fit(
        np.random.default_rng(42).normal(size=(3000, 3))))
    # same frame (location from the same rows, same precomputed covariance) but parameters differ
    with pytest.raises(ValueError, match="covariance="):
        daskdepth.merge([a, _fed(other_dirs, batches[1:])])
    # same parameters and frame, other leaf keys (one key of the first direction removed)
    b = _fed(start, batches[1:])
    block = b.summary_.blocks[0]
    cptr, cuts = base_keys(block, b._stream.bounds[block.j0:block.j1])
    counts = to_base(block, leaf_totals(block, b.summary_.n), b._stream.bounds[:block.mb])
    counts = np.delete(np.concatenate([counts[:2], [counts[2] + counts[3]], counts[4:]]), [])
    cuts = np.delete(cuts, 2)
    cptr = cptr - (np.arange(cptr.size) > 0)
    b.summary_.blocks[0] = stream_block(block.j0, block.j1, cptr, cuts, counts, block.ext)
    with pytest.raises(ValueError, match="other leaf keys.*template"):
        daskdepth.merge([a, b])
    with pytest.raises(ValueError, match="at least one"):
        daskdepth.merge([])
    with pytest.raises(TypeError, match="summaries add up"):
        daskdepth.merge([daskdepth.Projection(random_state=0).fit(batches[0])])
    with pytest.raises(ValueError, match="not fitted"):
        daskdepth.template(daskdepth.IRW())
    windowed = daskdepth.template(reference).set_params(window=2)
    with pytest.raises(ValueError, match="window=2"):
        daskdepth.merge([a, _fed(windowed, batches[1:])])


def test_feature_names_must_agree():
    rng = np.random.default_rng(1)
    first = pd.DataFrame(rng.normal(size=(1000, 2)), columns=["a", "b"])
    start = daskdepth.template(daskdepth.IRW(n_directions=8, tol=TOL, random_state=0).fit(first))
    a = daskdepth.template(start).partial_fit(first.iloc[:300])
    b = daskdepth.template(start)
    b.feature_names_in_ = np.array(["a", "c"], dtype=object)
    b.partial_fit(first.iloc[300:].rename(columns={"b": "c"}))
    with pytest.raises(ValueError, match="feature names"):
        daskdepth.merge([a, b])


@settings(max_examples=15)
@given(sizes=st.lists(st.integers(1, 40), min_size=2, max_size=5), tied=st.booleans(),
       shift=st.floats(-3, 3), order=st.randoms(use_true_random=False))
def test_random_groupings_of_small_tied_and_shifted_batches_give_the_same_bits(
        reference, points, sizes, tied, shift, order):
    rng = np.random.default_rng(len(sizes))
    batches = [rng.normal(size=(k, 3)) + shift * (i % 2) for i, k in enumerate(sizes)]
    if tied:
        batches = [np.round(b) for b in batches]
    start = daskdepth.template(reference)
    one_stream = _state(_fed(start, batches), points)
    parts = [_fed(start, [b]) for b in batches]
    while len(parts) > 1:  # merge two random neighbours-or-not at a time
        i, j = sorted(order.sample(range(len(parts)), 2))
        merged = daskdepth.merge([parts[j], parts[i]] if order.random() < 0.5
                                 else [parts[i], parts[j]])
        parts = [p for k, p in enumerate(parts) if k not in (i, j)] + [merged]
    assert _state(parts[0], points) == one_stream
