"""The row-sample pass: finite rows, non-finite rows and a keyed sample with global indices."""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np

from ..errors import MAX_BAD_ROWS
from ..kernels.hashing import keyed_sample
from ..runtime.client import phase
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name
from ..summary.nbytes import ArrayRecord


@dataclass
class RowSample(ArrayRecord):
    """Counts of finite and non-finite rows, and a Bernoulli sample of the finite ones.

    ``rows`` are the sampled rows in global row order and ``index`` their
    global row indices (counting every row of the input, finite or not).
    """

    n: int
    n_bad: int
    bad_rows: np.ndarray
    rows: np.ndarray
    index: np.ndarray


def keep_share(sample_size: int, rows: float) -> float:
    """The share of rows a keyed sample of about ``sample_size`` of ``rows`` rows keeps.

    Examples
    --------
    >>> keep_share(100, 400), keep_share(100, 50), keep_share(100, 0)
    (0.25, 1.0, 1.0)
    """
    return min(1.0, sample_size / max(1, rows))


def finite_and_kept(x: np.ndarray, row_start: int, seed: int,
                    p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk's finite rows (mask), its non-finite rows (indices) and its sampled finite rows.

    Rows are sampled with probability ``p`` by a draw keyed on (``seed``, the
    global row index) (:func:`daskdepth.kernels.hashing.keyed_sample`); the
    mask of those kept is the third item.
    """
    finite = np.isfinite(x).all(axis=1)
    return finite, np.flatnonzero(~finite), finite & keyed_sample(row_start, x.shape[0], seed, p)


def _sample_chunk(x: np.ndarray, row_start: int, seed: int, p: float) -> RowSample:
    x = np.asarray(x, dtype=np.float64)
    finite, bad, kept = finite_and_kept(x, row_start, seed, p)
    keep = np.flatnonzero(kept)
    return RowSample(int(finite.sum()), int(bad.size), row_start + bad[:MAX_BAD_ROWS], x[keep],
                     row_start + keep.astype(np.int64))


def _sample_merge(*parts: RowSample) -> RowSample:
    # Parts arrive in row order (tree reductions keep it): the result stays in global order.
    return RowSample(
        sum(p.n for p in parts), sum(p.n_bad for p in parts),
        np.concatenate([p.bad_rows for p in parts])[:MAX_BAD_ROWS],
        np.concatenate([p.rows for p in parts]), np.concatenate([p.index for p in parts]),
    )


def row_sample_pass(x: da.Array, *, seed: int, sample_size: int, token: str) -> RowSample:
    """One pass: finite rows, non-finite rows and a keyed sample of about ``sample_size`` rows.

    Each row is kept with probability ``sample_size / n_rows`` by a draw keyed
    on (``seed``, its global row index)
    (:func:`daskdepth.kernels.hashing.keyed_sample`), so the sample does not
    depend on the chunking; every finite row is kept when there are at most
    ``sample_size`` rows.
    """
    p = keep_share(sample_size, x.shape[0])
    blocks, starts = row_blocks(x)
    out = reduce_chunks(blocks, _sample_chunk, _sample_merge, key=(key_name("pool", token),),
                        merge_key=key_name("merge", token, "pool"), args=(seed, p),
                        starts=starts)
    with phase("pool"):
        (result,) = dask.compute(out)
    return result
