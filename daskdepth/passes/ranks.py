"""Exact order statistics of the rows' projections, per direction, in passes over the row chunks.

Used by the projection depth for each direction's median and MAD.  Each
selection problem (a direction, a wanted rank, and optionally a centre whose
distance is ranked instead of the projection) starts with a bracket read from
the row sample; each pass counts the values below, above and in equal-width
bins of every open bracket (:func:`daskdepth.kernels.projection.rank_counts`),
or collects the values of a bracket that holds few, and the client narrows the
bracket to the bin holding the rank, which holds fewer values at every pass.
Counts, extremes and collected values merge exactly, so the result is the
order statistic itself, whatever the chunking; when the sample is every finite
row it is selected from the sample, with no pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed

from ..kernels.projection import project_rows, rank_counts
from ..runtime.client import phase
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name
from ..summary.nbytes import ArrayRecord
from ..summary.rows import prepare_rows

#: Equal-width bins of each open bracket per pass.
NBINS = 256
#: A bracket holding at most this many values is collected whole by the next pass.
COLLECT_MAX = 2048
#: Bytes of the sample's values held at once (a block of directions at a time).
SAMPLE_BLOCK_BYTES = 64 * 2**20
#: Half-width of the bracket read from the row sample, in binomial standard deviations
#: of the wanted rank's position in the sample.
SAMPLE_MARGIN = 5.0


@dataclass
class Problems:
    """The open selection problems of one pass, grouped by direction (``qptr``)."""

    location: np.ndarray
    directions: np.ndarray
    dirs: np.ndarray
    qptr: np.ndarray
    centre: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    collect: np.ndarray


@dataclass
class RankCounts(ArrayRecord):
    """Per problem: counts, smallest and largest value of each bin, and the collected values."""

    counts: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    sizes: np.ndarray
    values: np.ndarray


def _count_chunk(x: np.ndarray, problems: Problems) -> RankCounts:
    x = np.asarray(x, dtype=np.float64)
    rows = prepare_rows(x, problems.location, merge=False, order=False)
    size = problems.centre.size
    counts = np.zeros((size, NBINS + 2), dtype=np.int64)
    vmin = np.full((size, NBINS + 2), np.inf)
    vmax = np.full((size, NBINS + 2), -np.inf)
    filled = np.zeros(size, dtype=np.int64)
    args = (rows.x, rows.valid, problems.directions, problems.dirs, problems.qptr,
            problems.centre, problems.lo, problems.hi, problems.collect, NBINS)
    rank_counts(*args, counts, vmin, vmax, filled, np.empty(0), np.zeros(size, dtype=np.int64))
    sizes = np.where(problems.collect, counts[:, 1:NBINS + 1].sum(axis=1), 0)
    values = np.empty(int(sizes.sum()))
    if values.size:
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        rank_counts(*args, counts, vmin, vmax, filled, values, offsets)
    return RankCounts(counts, vmin, vmax, sizes, values)


def _merge(*parts: RankCounts) -> RankCounts:
    sizes = np.sum([p.sizes for p in parts], axis=0)
    cuts = [np.cumsum(p.sizes)[:-1] for p in parts]
    pieces = [np.split(p.values, c) for p, c in zip(parts, cuts, strict=True)]
    values = np.concatenate([a for q in range(sizes.size) for a in (s[q] for s in pieces)]
                            or [np.empty(0)])
    return RankCounts(np.sum([p.counts for p in parts], axis=0),
                      np.min([p.vmin for p in parts], axis=0),
                      np.max([p.vmax for p in parts], axis=0), sizes, values)


def _sample_brackets(ordered: np.ndarray, rank: int, n: int) -> tuple[float, float, float]:
    """Bracket of the value of ``rank`` (of ``n``) from a sorted sample, and its expected count."""
    s = ordered.size
    q = rank / max(n - 1, 1)
    pos = q * (s - 1)
    margin = SAMPLE_MARGIN * np.sqrt(s * q * (1 - q)) + 2
    i, k = int(max(0, np.floor(pos - margin))), int(min(s - 1, np.ceil(pos + margin)))
    return float(ordered[i]), float(ordered[k]), n * (k - i + 1) / s


def order_statistics(x: da.Array, location: np.ndarray, directions: np.ndarray,
                     sample: np.ndarray, n: int, ranks: tuple[int, ...],
                     centres: np.ndarray | None, token: str, name: str) -> tuple[np.ndarray, int]:
    """Values of ``ranks`` (0-based, of the ``n`` finite rows) per direction, and the passes.

    The ranked values of direction ``j`` are the projections ``p`` of the rows
    centred on ``location`` on ``directions[j]``, or ``|p - centres[j]|``.
    ``sample`` (its finite rows in global order, all of them when it has
    ``n``) gives the first brackets.  Each pass is the phase ``name``.
    """
    m = directions.shape[0]
    centre_of = np.full(m, np.nan) if centres is None else np.asarray(centres, dtype=np.float64)
    out = np.empty((m, len(ranks)))
    lo, hi, collect = {}, {}, {}
    rows = prepare_rows(sample, location, merge=False, order=False)
    step = max(1, SAMPLE_BLOCK_BYTES // (8 * max(1, rows.x.shape[0])))
    for j0 in range(0, m, step):  # the sample's values, a block of directions at a time
        j1 = min(m, j0 + step)
        proj = _sample_values(rows.x, directions[j0:j1], centre_of[j0:j1])
        if sample.shape[0] == n:  # every finite row: select in memory
            out[j0:j1] = np.partition(proj, list(ranks), axis=1)[:, list(ranks)]
            continue
        ordered = np.sort(proj, axis=1)
        for j in range(j0, j1):
            for i, rank in enumerate(ranks):
                lo[j, i], hi[j, i], expected = _sample_brackets(ordered[j - j0], rank, n)
                collect[j, i] = expected <= COLLECT_MAX // 2
    if sample.shape[0] == n:
        return out, 0
    # Open problems: (direction, index of the rank), with their brackets.
    todo = sorted(lo)
    blocks, _ = row_blocks(x)
    passes = 0
    while todo:
        problems = Problems(location, np.ascontiguousarray(directions),
                            np.array(sorted({j for j, _ in todo}), dtype=np.int64),
                            np.zeros(0, dtype=np.int64), np.empty(len(todo)),
                            np.array([lo[t] for t in todo]), np.array([hi[t] for t in todo]),
                            np.array([collect[t] for t in todo]))
        problems.qptr = np.searchsorted([j for j, _ in todo], np.append(problems.dirs, m))
        problems.centre = centre_of[[j for j, _ in todo]]
        shared = delayed(problems, name=key_name("count", token, name, passes, "problems"),
                         traverse=False)
        result = reduce_chunks(blocks, _count_chunk, _merge,
                               key=(key_name("count", token, name, passes),),
                               merge_key=key_name("merge", token, "count", name, passes),
                               args=(shared,))
        with phase(name):
            (counts,) = dask.compute(result)
        passes += 1
        cuts = np.concatenate([[0], np.cumsum(counts.sizes)])
        left = []
        for q, (j, i) in enumerate(todo):
            c = counts.counts[q]
            rank = ranks[i]
            cum = np.cumsum(c)
            b = int(np.searchsorted(cum, rank, side="right"))  # the bin holding the rank
            before = int(cum[b] - c[b])
            low, high = counts.vmin[q, b], counts.vmax[q, b]
            if collect[j, i] and 1 <= b <= NBINS:  # the bracket's values were collected
                values = counts.values[cuts[q]:cuts[q + 1]]
                k = rank - int(c[0])
                out[j, i] = np.partition(values, k)[k]
            elif low == high or rank == before:
                out[j, i] = low
            elif rank == before + c[b] - 1:
                out[j, i] = high
            else:
                lo[j, i], hi[j, i], collect[j, i] = low, high, bool(c[b] <= COLLECT_MAX)
                left.append((j, i))
        todo = left
    return out, passes


def middle(values: np.ndarray) -> np.ndarray:
    """NumPy's median from its middle order statistics (one or two columns): their mean.

    Examples
    --------
    >>> middle(np.array([[1.0, 2.0], [3.0, 3.0]])).tolist()
    [1.5, 3.0]
    """
    return values[:, 0] if values.shape[1] == 1 else (values[:, 0] + values[:, 1]) / 2


def median_and_mad(rows: np.ndarray, location: np.ndarray,
                   directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of the projections of all the (finite) ``rows``, in memory.

    Each block of directions is projected once for both; the same values as
    :func:`order_statistics` selects in passes.
    """
    n, m = rows.shape[0], directions.shape[0]
    ranks = sorted({(n - 1) // 2, n // 2})
    xc = prepare_rows(rows, location, merge=False, order=False).x
    med, mad = np.empty(m), np.empty(m)
    step = max(1, SAMPLE_BLOCK_BYTES // (8 * max(1, n)))
    for j0 in range(0, m, step):
        j1 = min(m, j0 + step)
        proj = _sample_values(xc, directions[j0:j1], np.full(j1 - j0, np.nan))
        med[j0:j1] = middle(np.partition(proj, ranks, axis=1)[:, ranks])
        dev = np.abs(proj - med[j0:j1, None])
        mad[j0:j1] = middle(np.partition(dev, ranks, axis=1)[:, ranks])
    return med, mad


def _sample_values(xc: np.ndarray, directions: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The ranked values of centred rows, ``(directions, rows)``, computed as the passes do."""
    out = np.empty((directions.shape[0], xc.shape[0]))
    project_rows(xc, np.ascontiguousarray(directions), out)
    has = ~np.isnan(centres)
    out[has] = np.abs(out[has] - centres[has, None])
    return out
