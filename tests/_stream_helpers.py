"""Helpers shared by the tests of streams that hold their rows (``test_stream_*``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def normal_batches(k: int, rows: int = 2000, *, d: int = 3, seed: int = 0) -> list[np.ndarray]:
    """``k`` batches of ``rows`` standard normal rows of ``d`` features, from one seeded stream."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(rows, d)) for _ in range(k)]


def fingerprint(model: Any, points: np.ndarray) -> tuple:
    """What a stream's next steps depend on, as bytes and numbers: equal for equal streams.

    The depths of ``points`` (as bytes), the bound, ``offset_``, the row and
    batch counters and the depths of the row sample that sets ``offset_``.
    """
    return (model.score_samples(points).tobytes(), model.error_bound_, model.offset_,
            model.n_samples_fit_, model.n_batches_, model.batch_rows_.tolist(),
            model._sample_depth.tobytes())
