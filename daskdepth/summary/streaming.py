"""Leaf summaries that follow a stream of batches: counts added, merged and dropped (NumPy only).

A stream fixes its **base keys** once (the leaf keys of the first fit, or of
the template it started from): every later batch is counted into the same
leaves, so counts from any batches add up exactly (integers in float64) and
the extremes of the projections merge by min / max.  The block that scores is
a function of the base keys, the summed counts and the extremes only
(:func:`stream_block`): each direction's end leaves, which hold the rows
beyond the base's first and last key, get a key at the smallest value (and
the float above the largest) seen, so points beyond all the data stay exact.
Any grouping or order of the same batches therefore gives the same bits,
and so does dropping a batch (its counts subtracted, the extremes taken
again over the batches kept).

A scoring block's keys are its base keys plus at most one key at each end of
a direction; which ones were added is read from the base's first and last key
per direction (``bounds``, an ``(mb, 2)`` array): a first key below
``bounds[jj, 0]`` and a last key above ``bounds[jj, 1]`` are extensions.

Rows that set ``offset_`` after a batch come from a content-keyed sample
(:func:`bottom_rows`): every row gets a key hashed from its values, and the
sample of any set of rows is its :data:`STREAM_SAMPLE` rows of smallest key,
so the sample of a union is the sample of its parts' samples, in any order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..kernels.leaves import recover_counts, tabulate_leaves
from ..kernels.routing import pad_keys
from .leaves import BlockLeaves, LeafCounts
from .nbytes import ArrayRecord

#: Rows of the content-keyed sample whose depths set ``offset_`` (and that
#: :func:`daskdepth.drift` compares new rows with) after ``partial_fit``: the
#: contamination quantile of 4,096 depths is within about 0.005 in rank (one
#: standard error at contamination 0.1) of the quantile over all rows.
STREAM_SAMPLE = 4096
#: ... at most this many bytes of rows (wide data keeps fewer, at least
#: :data:`STREAM_SAMPLE_MIN`: 1,048 rows at 1,000 features).
STREAM_SAMPLE_BYTES = 8 * 2**20
STREAM_SAMPLE_MIN = 512


def sample_rows(d: int) -> int:
    """Rows of the content-keyed sample for ``d`` features (:data:`STREAM_SAMPLE` up to 255).

    Examples
    --------
    >>> sample_rows(10), sample_rows(1000), sample_rows(10**6)
    (4096, 1047, 512)
    """
    return int(max(STREAM_SAMPLE_MIN, min(STREAM_SAMPLE, STREAM_SAMPLE_BYTES // (8 * (d + 1)))))

#: Mixed into the row keys, so that they are not the hashes the rows' deduplication uses.
_ROW_KEY_SEED = np.uint64(0x5EED57AE)


@dataclass
class BatchCounts(ArrayRecord):
    """One batch's rows per base leaf of one direction block, and its extremes.

    ``counts`` (float64, one per base leaf of the block, exact integers) and
    ``ext`` (``(mb, 2)`` float64: each direction's smallest and largest
    projection of the batch's rows; ``(+inf, -inf)`` for no rows).
    """

    counts: np.ndarray
    ext: np.ndarray


@dataclass
class RowSample(ArrayRecord):
    """A content-keyed row sample: ``rows`` ``(k, d)`` float64 and their ``keys`` (uint64).

    Sorted by key (then by the rows' values), at most :data:`STREAM_SAMPLE` rows.
    """

    keys: np.ndarray
    rows: np.ndarray

    @classmethod
    def empty(cls, d: int) -> RowSample:
        return cls(np.zeros(0, dtype=np.uint64), np.zeros((0, d)))

    @property
    def size(self) -> int:
        return int(self.keys.shape[0])


@dataclass
class StreamState:
    """What a model that follows a stream keeps beyond its summary.

    ``bounds`` ``(m, 2)`` float64: the first and last base key of every
    direction (which scoring keys are extensions, see the module docstring).
    ``sample``: the content-keyed row sample of the rows the summary holds.
    ``window``: the number of most recent batches kept (None: all); then
    ``history`` holds, oldest first, per kept batch, its :class:`BatchCounts`
    per direction block, ``history_rows`` its finite rows and
    ``history_samples`` its own row sample: ``8`` bytes per base leaf, ``16``
    per direction and at most :func:`sample_rows` rows of ``8 (d + 1)`` bytes per
    batch (:func:`history_bytes`).  ``rows``: the rows the summary holds,
    ``(n, d)`` float64 in batch order (oldest first), kept by a stream that
    started small from the conversion of its exact summary to leaves until
    they would pass the rows a first fit plans its leaves on
    (:func:`daskdepth.fitting.update.row_limit`, about ``16 / tol``), so
    that its leaves can be planned again on all of them, and from its first
    batch by a stream whose first ``partial_fit`` planned leaves on at most
    that many rows; a :func:`daskdepth.merge` of models that each hold all
    their rows holds the union's, sorted by their bits; None otherwise.
    """

    bounds: np.ndarray
    sample: RowSample
    window: int | None = None
    history: list[list[BatchCounts]] = field(default_factory=list)
    history_rows: list[int] = field(default_factory=list)
    history_samples: list[RowSample] = field(default_factory=list)
    rows: np.ndarray | None = None


def history_bytes(n_leaves: int, m: int, d: int) -> int:
    """Bytes one batch adds to a window's history: its counts, extremes and row sample.

    Examples
    --------
    >>> history_bytes(10_000, 100, 5)
    278208
    """
    return 8 * int(n_leaves) + 16 * int(m) + sample_rows(d) * (8 * int(d) + 8)


# ---------------------------------------------------------------- base keys and counts


def key_bounds(block: BlockLeaves) -> np.ndarray:
    """``(mb, 2)``: the first and last key of every direction of ``block`` (its base bounds).

    Every direction of a fitted block has keys (at least its smallest value and
    the float above its largest); a direction without keys is refused.
    """
    cptr = block.cptr
    if (np.diff(cptr) < 1).any():
        raise ValueError("a direction of this summary has no leaf keys: it cannot start a "
                         "stream (fit it on at least two distinct rows)")
    cuts = block.cuts
    return np.stack([cuts[cptr[:-1]], cuts[cptr[1:] - 1]], axis=1)


def _extensions(block: BlockLeaves, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, whether ``block`` has a key added below / above its base keys."""
    cptr = block.cptr
    cuts = block.cuts
    has = np.diff(cptr) > 0
    first = np.where(has, cuts[np.minimum(cptr[:-1], max(cuts.size - 1, 0))], np.inf) \
        if cuts.size else np.full(block.mb, np.inf)
    last = np.where(has, cuts[np.maximum(cptr[1:] - 1, 0)], -np.inf) \
        if cuts.size else np.full(block.mb, -np.inf)
    return has & (first < bounds[:, 0]), has & (last > bounds[:, 1])


def base_keys(block: BlockLeaves, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cptr, cuts)`` of the base keys of ``block``: its keys less the added end keys."""
    head, tail = _extensions(block, bounds)
    cptr = block.cptr
    cuts = block.cuts
    keep = np.ones(cuts.size, dtype=bool)
    keep[cptr[:-1][head]] = False
    keep[cptr[1:][tail] - 1] = False
    removed = head.astype(np.int64) + tail.astype(np.int64)
    base_cptr = np.concatenate([[0], np.cumsum(np.diff(cptr) - removed)]).astype(np.int64)
    return base_cptr, np.ascontiguousarray(cuts[keep])


def leaf_totals(block: BlockLeaves, n: int) -> np.ndarray:
    """The rows of every leaf of ``block`` (float64), recovered from ``lut`` when dropped.

    :func:`~daskdepth.kernels.leaves.recover_counts` reads the counts off
    ``lut`` from both ends and tries a few split points between the readings.
    A block that holds few rows in many leaves (a template fed a small or a
    drifted batch) has long runs of empty leaves at a direction's ends, where
    many split points look valid and the few tries run out; the empty ends
    (``lut == 0`` means no rows there) are then cut off, one empty leaf kept on
    each side so that the atoms inside stay inside, and the rest recovered.
    The counts found are checked: they tabulate to ``lut`` exactly.
    """
    if block.counts is not None:
        return np.asarray(block.counts, dtype=np.float64)
    counts = np.zeros(block.n_leaves)
    if n == 0:
        return counts
    if recover_counts(block.cptr, block.keys, block.lut, float(n), counts):
        return counts
    lut = block.lut
    lptr, cptr = block.lptr, block.cptr
    leaves, keys, sizes = [], [], []
    for jj in range(block.mb):
        l0, l1 = int(lptr[jj]), int(lptr[jj + 1])
        held = np.flatnonzero(lut[l0:l1] > 0)
        a = max(int(held[0]) - 1, 0) if held.size else 0
        b = min(int(held[-1]) + 1, l1 - l0 - 1) if held.size else 0
        leaves.append(l0 + np.arange(a, b + 1))
        keys.append(int(cptr[jj]) + np.arange(a, b))
        sizes.append(b - a)
    sub_cptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    sub_keys = pad_keys(sub_cptr, np.ascontiguousarray(block.cuts[np.concatenate(keys)]))
    picked = np.concatenate(leaves)
    sub_counts = np.zeros(picked.size)
    found = recover_counts(sub_cptr, sub_keys, np.ascontiguousarray(lut[picked]), float(n),
                           sub_counts)
    counts[picked] = sub_counts
    want, worst = np.empty(lut.size), np.zeros(block.mb)
    tabulate_leaves(cptr, block.keys, counts, want, worst)
    if not found or not np.array_equal(want, lut.astype(np.float64)):
        raise ValueError("the block's tabulated scores are not those of leaf counts adding up "
                         f"to its {n} rows")  # pragma: no cover - a block this package built
    return counts


def to_base(block: BlockLeaves, counts: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Counts on the leaves of ``block`` folded onto its base leaves (end leaves joined)."""
    head, tail = _extensions(block, bounds)
    lptr = block.lptr
    sizes = np.diff(lptr)
    base_sizes = sizes - head - tail
    base_lptr = np.concatenate([[0], np.cumsum(base_sizes)])
    leaf_dir = np.repeat(np.arange(block.mb), sizes)
    local = np.arange(lptr[-1]) - lptr[leaf_dir]
    local = np.clip(local - head[leaf_dir], 0, base_sizes[leaf_dir] - 1)
    index = base_lptr[leaf_dir] + local
    return np.bincount(index, weights=np.asarray(counts, dtype=np.float64),
                       minlength=int(base_lptr[-1]))


def batch_counts(block: BlockLeaves, part: LeafCounts, bounds: np.ndarray) -> BatchCounts:
    """A batch's counts on the leaves of ``block`` (a histogram pass) as base-leaf counts."""
    return BatchCounts(to_base(block, part.counts, bounds), np.array(part.ext, dtype=np.float64))


def merged_ext(parts: list[np.ndarray], mb: int) -> np.ndarray:
    """The extremes of the union of the parts' rows (``(+inf, -inf)`` for none)."""
    ext = np.empty((mb, 2))
    ext[:, 0], ext[:, 1] = np.inf, -np.inf
    for p in parts:
        np.minimum(ext[:, 0], p[:, 0], out=ext[:, 0])
        np.maximum(ext[:, 1], p[:, 1], out=ext[:, 1])
    return ext


def stream_block(j0: int, j1: int, base_cptr: np.ndarray, base_cuts: np.ndarray,
                 counts: np.ndarray, ext: np.ndarray) -> BlockLeaves:
    """The scoring block of the base keys with ``counts`` per base leaf and extremes ``ext``.

    No leaves are merged: the base keys stay, each direction gets a key at its
    smallest value when its first base leaf holds rows, and at the float
    above its largest when its last does; ``lut`` and ``worst`` are tabulated
    from the exact counts (:meth:`BlockLeaves.finished`).  A function of its
    arguments only, so the same counts and extremes give the same bits.

    The block keeps its leaf ``counts`` (in ``lut``'s dtype: 4 bytes per leaf
    up to 2**23 rows, else 8), unlike a fitted block: reading them back off
    ``lut`` (:func:`leaf_totals`) is ambiguous for a few rows spread over many
    leaves (a template's first small batch), and the next batch needs them.

    Examples
    --------
    >>> b = stream_block(0, 1, np.array([0, 1]), np.array([0.0]), np.array([2.0, 1.0]),
    ...                  np.array([[-1.0, 3.0]]))
    >>> b.cuts.tolist(), b.lut.tolist(), b.counts.tolist()
    ([-1.0, 0.0, 3.0000000000000004], [0.0, 1.0, 0.5, 0.0], [0.0, 2.0, 1.0, 0.0])
    """
    planned = BlockLeaves.planned(int(j0), int(j1), base_cptr, base_cuts)
    return planned.finished(LeafCounts(np.ascontiguousarray(counts, dtype=np.float64),
                                       np.ascontiguousarray(ext, dtype=np.float64)))


def updated_block(block: BlockLeaves, n: int, bounds: np.ndarray, add: BatchCounts | None,
                  drop: BatchCounts | None = None,
                  ext: np.ndarray | None = None) -> BlockLeaves:
    """``block`` (of ``n`` rows) with a batch's counts added and, for a window, one dropped.

    ``ext`` replaces the extremes (a window's, taken again over the batches it
    keeps; default: ``block``'s merged with ``add``'s).
    """
    base_cptr, base_cuts = base_keys(block, bounds)
    counts = to_base(block, leaf_totals(block, n), bounds)
    if add is not None:
        counts = counts + add.counts
    if drop is not None:
        counts = counts - drop.counts
    if ext is None:
        ext = merged_ext([block.ext] + ([add.ext] if add is not None else []), block.mb)
    return stream_block(block.j0, block.j1, base_cptr, base_cuts, counts, ext)


def base_state(block: BlockLeaves, n: int,
               bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, BatchCounts]:
    """``(cptr, cuts, counts)`` of ``block``'s base keys, with its rows as base counts."""
    base_cptr, base_cuts = base_keys(block, bounds)
    counts = to_base(block, leaf_totals(block, n), bounds)
    return base_cptr, base_cuts, BatchCounts(counts, np.array(block.ext, dtype=np.float64))


def empty_block(block: BlockLeaves, bounds: np.ndarray) -> BlockLeaves:
    """``block``'s base keys holding no rows: a template's block (scores nothing yet)."""
    base_cptr, base_cuts = base_keys(block, bounds)
    counts = np.zeros(int(base_cptr[-1]) + block.mb)
    return stream_block(block.j0, block.j1, base_cptr, base_cuts, counts,
                        merged_ext([], block.mb))


# ---------------------------------------------------------------- content-keyed row sample


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every element (uint64 arithmetic wraps, as the hash wants)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def row_keys(rows: np.ndarray) -> np.ndarray:
    """A uint64 key of each row, hashed from its float64 bits (equal rows, equal keys)."""
    bits = np.ascontiguousarray(rows, dtype=np.float64).view(np.uint64)
    h = np.full(bits.shape[0], _ROW_KEY_SEED ^ np.uint64(bits.shape[1]), dtype=np.uint64)
    for k in range(bits.shape[1]):
        h = _mix(h ^ bits[:, k])
    return h


def _smallest(keys: np.ndarray, rows: np.ndarray, k: int) -> RowSample:
    """The ``k`` rows of smallest key, ordered by key, then by their values (deterministic).

    The candidates are narrowed in linear time first (every row whose key is
    at most the ``k``-th smallest: ties at the cut stay candidates), and only
    they are sorted.
    """
    if keys.size > k:
        cut = np.partition(keys, k - 1)[k - 1]
        chosen = np.flatnonzero(keys <= cut)
        keys, rows = keys[chosen], rows[chosen]
    order = np.lexsort((*rows.T[::-1], keys)) if rows.size else np.argsort(keys, kind="stable")
    order = order[:k]
    return RowSample(np.ascontiguousarray(keys[order]), np.ascontiguousarray(rows[order]))


def bottom_rows(x: np.ndarray, k: int) -> RowSample:
    """The content-keyed sample of the finite rows of ``x``: its ``k`` rows of smallest key.

    Examples
    --------
    >>> x = np.arange(20.0).reshape(10, 2)
    >>> s = bottom_rows(x, 3)
    >>> s.rows.shape, bool((merge_samples([bottom_rows(x[:4], 3), bottom_rows(x[4:], 3)],
    ...                                   3).rows == s.rows).all())
    ((3, 2), True)
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x).all(axis=1)]
    return _smallest(row_keys(x), x, k)


def merge_samples(parts: list[RowSample], k: int) -> RowSample:
    """The content-keyed sample of the union of the parts' rows (any order, same result)."""
    full = [p for p in parts if p.size]
    if not full:
        return parts[0] if parts else RowSample.empty(0)
    return _smallest(np.concatenate([p.keys for p in full]),
                     np.concatenate([p.rows for p in full]), k)
