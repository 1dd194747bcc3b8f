"""The bound warning says why: a window (or model) holding few rows, or drift.

A window that holds fewer rows than leaves at ``tol`` need (about ``16 / tol``)
counts few rows per leaf, and the certified bound, set by each direction's
fullest leaf, passes 2 x tol on data that do not drift: a Poisson maximum,
which no choice of leaves removes.  Before, the StreamBoundWarning then named
drift away from the first leaves and ``fit`` on recent data; now it says that
the window holds N rows, fewer than about M that tol needs, so that counting
noise alone moves the bound, and names a longer window or a larger tol.  With
enough rows, the warning names drift as before.
"""

from __future__ import annotations

import warnings

import numpy as np

import daskdepth


def _caught(model, batches):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in batches:
            model.partial_fit(batch)
    return [str(w.message) for w in caught if issubclass(w.category,
                                                         daskdepth.StreamBoundWarning)]


def test_a_window_of_few_rows_says_counting_noise_and_names_the_fixes():
    rng = np.random.default_rng(0)
    # a window started from a template holds no rows to plan its leaves again on (a stream's
    # own first batch of 4,000 rows would hold them, and plan again instead of warning)
    reference = daskdepth.AIIRW(n_directions=30, tol=1e-3, random_state=0).partial_fit(
        rng.normal(size=(4000, 3)))
    model = daskdepth.template(reference).set_params(window=5)
    batches = [rng.normal(size=(800, 3)) for _ in range(12)]
    messages = _caught(model, batches)
    assert len(messages) == 1  # once per model
    assert model.n_samples_fit_ == 4000  # the window: 5 x 800 rows
    text = messages[0]
    assert "the window of 5 batches holds 800 rows, fewer than about 16,000" in text
    assert "counting noise alone moves the bound" in text
    assert "a longer window (window=) or a larger tol" in text
    assert "drift away" not in text


def test_a_model_holding_enough_rows_names_drift_and_fit():
    rng = np.random.default_rng(6)
    # a template holds no rows to plan its leaves again on (a stream's own first batch of
    # 1,000 rows would hold them, and plan again on the drifted rows instead of warning)
    model = daskdepth.template(daskdepth.IRW(n_directions=8, tol=0.02, random_state=0)
                               .partial_fit(rng.normal(size=(1000, 2))))  # 16 / tol = 800
    batches = [rng.normal(size=(1000, 2))] + [rng.normal(size=(1000, 2)) * 0.05 + 0.3
                                              for _ in range(3)]
    messages = _caught(model, batches)
    assert len(messages) == 1
    assert "the data drift away from them" in messages[0]
    assert "fit a model on recent data" in messages[0]
    assert "counting noise" not in messages[0]


def test_a_model_of_few_rows_without_a_window_says_so_too():
    """A template fed one small batch: few rows per leaf, no window to lengthen."""
    rng = np.random.default_rng(0)
    reference = daskdepth.IRW(n_directions=20, tol=1e-3, random_state=0).partial_fit(
        rng.normal(size=(20_000, 2)))
    model = daskdepth.template(reference)
    messages = _caught(model, [rng.normal(size=(500, 2))])
    assert len(messages) == 1
    assert "the model holds 500 rows, fewer than about 16,000 that tol=0.001 needs" in messages[0]
    assert "more rows (fit or partial_fit at least that many) or a larger tol" in messages[0]
    assert "drift away" not in messages[0]
