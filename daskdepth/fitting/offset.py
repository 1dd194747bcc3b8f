"""The offset sample: depths of at most :data:`SAMPLE_SIZE` sampled rows, which set ``offset_``.

One function for every depth, so that the sample, its placement and the
warnings it silences are the same for all of them.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..kernels.hashing import keyed_sample
from ..passes.scoring import score_array
from ..runtime.client import keep_placement, phase, sent_in_graph
from ..runtime.keys import key_name
from ..runtime.memory import row_chunk
from ..summary.statistics import MEAN, Statistic

#: Rows whose depths set ``offset_``: the contamination quantile of 65,536 depths is
#: within about 1e-3 in rank of the quantile over all training rows.
SAMPLE_SIZE = 1 << 16


def offset_pick(rows: np.ndarray) -> np.ndarray:
    """At most :data:`SAMPLE_SIZE` of the sampled ``rows``, for ``offset_``.

    The sample is in global row order, so evenly spaced picks are as random and
    do not depend on the chunking.

    Examples
    --------
    >>> offset_pick(np.zeros((10, 2))).shape
    (10, 2)
    """
    if rows.shape[0] > SAMPLE_SIZE:
        rows = rows[np.linspace(0, rows.shape[0] - 1, SAMPLE_SIZE).astype(np.int64)]
    return rows


def offset_depths(summary: Any, sample: np.ndarray, token: str,
                  statistic: Statistic = MEAN) -> np.ndarray:
    """Scores (``statistic`` of ``summary``) of the rows :func:`offset_pick` keeps of ``sample``."""
    sample = offset_pick(sample)
    rows = da.from_array(sample, chunks=(row_chunk(*sample.shape), sample.shape[1]),
                         name=key_name("cut", token))
    # The sample rows (up to SAMPLE_SIZE of them, 20 MiB at 40 features) are sent in
    # the graph on purpose, once.
    with phase("offset"), keep_placement(), sent_in_graph():
        return score_array(rows, summary, raise_nan=False, token=token,
                           statistic=statistic).compute()


#: Seed of the keyed row sample of the training depths that sets ``offset_`` in
#: ``fit_predict`` of a dask input (fixed: it depends on nothing the user sets).
OFFSET_SEED = 0x5EED


def offset_sample(block: np.ndarray, p: float, block_info: dict | None = None) -> np.ndarray:
    """The depths of a block of training rows kept by a draw of probability ``p``.

    Keyed on the global row index (:func:`daskdepth.kernels.hashing.keyed_sample`),
    so the sample does not depend on the chunking.
    """
    if p >= 1:
        return block
    start = block_info[0]["array-location"][0][0] if block_info else 0
    return block[keyed_sample(start, block.shape[0], OFFSET_SEED, p)]
