"""The moments pass (count, mean, scatter, non-finite rows and a keyed row sample, in one
pass), and the factor pass (the ``R`` of the centred rows, for ill-conditioned covariances)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed
from threadpoolctl import threadpool_limits

from ..errors import MAX_BAD_ROWS
from ..kernels.frame import Support
from ..kernels.moments import (
    Moments,
    add_dd,
    chunk_factor,
    chunk_moments,
    column_sums_dd,
    merge_factors,
    merge_moments,
)
from ..kernels.selection import chunk_distances
from ..runtime.client import active_client, phase
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name, unique_key
from ..summary.nbytes import ArrayRecord
from .sampling import finite_and_kept, keep_share


@dataclass
class ChunkMoments(ArrayRecord):
    """Moments of the finite rows, non-finite rows and a Bernoulli row sample."""

    n: int
    mean: np.ndarray
    scatter: np.ndarray
    n_bad: int
    bad_rows: np.ndarray
    sample: np.ndarray
    total: np.ndarray  # column sums as double-double (2, d)
    mean_lo: np.ndarray  # low part of ``mean`` as a double-double, for exact merges

    @property
    def moments(self) -> Moments:
        """Count, mean and scatter as a :class:`~daskdepth.kernels.moments.Moments` record."""
        return Moments(self.n, self.mean, self.scatter, self.mean_lo)

    @property
    def exact_mean(self) -> np.ndarray:
        """Mean from the compensated sums: the same bits however the rows are chunked.

        Where a column's sum overflows float64 (values near 1e308), the merged
        mean, which never sums the values, stands in for it (its last bits may
        then depend on the chunking).
        """
        mean = (self.total[0] + self.total[1]) / max(self.n, 1)
        over = ~np.isfinite(mean)
        if over.any():
            mean[over] = (self.mean + self.mean_lo)[over]
        return mean


def _moments_chunk(x: np.ndarray, row_start: int, seed: int, p: float) -> ChunkMoments:
    x = np.asarray(x, dtype=np.float64)
    finite, bad, keep = finite_and_kept(x, row_start, seed, p)
    mom = chunk_moments(x, finite)
    return ChunkMoments(int(mom.count), mom.mean, mom.scatter, int(bad.size),
                        row_start + bad[:MAX_BAD_ROWS], x[keep], column_sums_dd(x, finite),
                        mom.mean_lo)


def _moments_merge(*parts: ChunkMoments) -> ChunkMoments:
    out = parts[0]
    for b in parts[1:]:
        mom = merge_moments(out.moments, b.moments)
        out = ChunkMoments(
            int(mom.count), mom.mean, mom.scatter, out.n_bad + b.n_bad,
            np.concatenate([out.bad_rows, b.bad_rows])[:MAX_BAD_ROWS],
            np.concatenate([out.sample, b.sample]), add_dd(out.total, b.total), mom.mean_lo,
        )
    return out


def moments_pass(x: da.Array, *, seed: int, sample_size: int, token: str,
                 keep: bool = False) -> tuple[ChunkMoments, Any]:
    """One pass: count, mean, scatter, non-finite rows and a row sample.

    Returns the result and, with ``keep`` on a distributed client, the future of
    it (else None): what the summary's pilots read of the row sample is then
    made from it where it is (:func:`sample_columns`), not sent from here.
    """
    p = keep_share(sample_size, x.shape[0])
    blocks, starts = row_blocks(x)
    out = reduce_chunks(blocks, _moments_chunk, _moments_merge,
                        key=(key_name("tally", token),),
                        merge_key=key_name("merge", token, "moments"),
                        args=(seed, p), starts=starts)
    client = active_client() if keep else None
    with phase("moments"):
        if client is None:
            (result,) = dask.compute(out)
            return result, None
        future = client.compute(out)
        return future.result(), future


def _centred_columns(mom: ChunkMoments, location: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray((mom.sample - location).T)


def sample_columns(source: Any, location: np.ndarray, name: str) -> Any:
    """The future of the row sample of ``source`` minus ``location``, transposed.

    ``source`` is the future :func:`moments_pass` kept; the columns are
    computed from it on the worker that holds it, and ``source`` is released
    (its key stays on the scheduler as the columns' dependency until they are
    computed, and can be computed again if a worker is lost).  Sending the
    columns from the client instead would make them part of a task's
    definition, which every worker that runs it keeps for as long as any key
    computed from it lives (distributed keeps the definitions of the released
    dependencies of keys in memory): the whole row sample, on one worker, for
    the life of the summary.
    """
    key = unique_key(name)
    future = source.client.compute(delayed(_centred_columns, pure=True)(
        source, location, dask_key_name=key))
    source.release()
    return future


def factor_pass(x: da.Array, location: np.ndarray, *, support: Support | None = None,
                token: str, k: int = 0) -> tuple[float, np.ndarray]:
    """One pass: count and ``R`` factor of the finite rows minus ``location`` (tall-skinny QR).

    Each chunk's ``R`` is merged up a tree by QR of the stacked factors
    (:func:`daskdepth.kernels.moments.merge_factors`); ``support`` restricts the
    rows to those a covariance is computed from.  Its condition number is the
    rows', so it decides the rank and whitens where the covariance (whose
    condition number is the square) cannot.  ``k`` numbers the factor passes of
    one fit (keys ``daskdepth-qr-<token>-<k>``).
    """
    blocks, _ = row_blocks(x)
    out = reduce_chunks(blocks, _factor_chunk, merge_factors, key=(key_name("qr", token, k),),
                        merge_key=key_name("merge", token, "qr", k),
                        args=(np.ascontiguousarray(location), support))
    # Chunk QRs already run in parallel: BLAS threads in each only contend for the cores.
    with phase("factor"), threadpool_limits(limits=1, user_api="blas"):
        (result,) = dask.compute(out)
    return result


def _factor_chunk(x: np.ndarray, location: np.ndarray,
                  support: Support | None) -> tuple[float, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    keep = None
    if support is not None:
        finite = x[np.isfinite(x).all(axis=1)]
        keep = chunk_distances(finite, support.location, support.whitening) < support.threshold
    return chunk_factor(x, location, keep)
