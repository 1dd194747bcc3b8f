"""Explanations of depths: each row's least-deep directions and its features' contributions.

A projection depth is built from a row's univariate depths along known
directions, and the directions along which a row is least deep are, by
construction, those in which it is outlying.  :func:`least_deep` finds them
for every row of a chunk (a bounded top-k over the summary's direction
blocks, with the values the depth itself is made of; for the projection depth,
over its directions' medians and MADs), and :func:`contributions` spreads them
over the features.  NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels.top import NO_DIRECTION, empty_top
from .blocks import is_handle
from .leaves import BlockLeaves
from .projection import ProjectionSummary
from .rows import Rows, prepare_rows
from .sorted import BlockSorted

#: Largest univariate depth: ``min(L, G) / n`` (at most 1/2 but for ties at the median),
#: and the projection depth's ``1 / (1 + o)``.
DEEPEST_COUNT, DEEPEST_PROJECTION = 0.5, 1.0


@dataclass
class TopDirections:
    """Each row's ``k`` least-deep directions, in order (NaN / -1 where not scored).

    ``direction`` (int64) holds direction indices (rows of the summary's
    ``directions``), ``depth`` their univariate depths ``min(L_j, G_j) / n``
    (the values the row's depth averages or, for the halfspace depth, takes
    the minimum of; for the projection depth ``1 / (1 + |p_j - med_j| /
    mad_j)``, whose minimum is the depth), ``side`` -1 where the row lies
    below the direction's median, +1 above, 0 at it.
    """

    direction: np.ndarray
    depth: np.ndarray
    side: np.ndarray


def least_deep(summary: Any, x: np.ndarray, k: int, valid: np.ndarray | None = None,
               scales: np.ndarray | None = None) -> TopDirections:
    """The ``k`` directions of smallest univariate depth of every row of ``x``.

    ``summary`` is a :class:`~daskdepth.summary.depth.DepthSummary` whose
    blocks offer ``top_into`` (leaves, sorted projections or handles of them),
    or a :class:`~daskdepth.summary.projection.ProjectionSummary`.  Directions
    of equal depth go to the one along which the row lies farthest from the
    location, ``|<x - location, v_j>| / scales[j]`` (the spreads of
    :func:`direction_scales`; without ``scales``, or where a spread is 0, that
    distance counts as 0), then to the smaller index.  The projection depth's
    directions are ordered by outlyingness ``|p_j - med_j| / mad_j``, largest
    first (so by depth too), and ties in it broken the same way.  Duplicate
    rows are explained once.

    Examples
    --------
    >>> import numpy as np
    >>> from daskdepth.summary.depth import DepthSummary
    >>> from daskdepth.summary.sorted import BlockSorted
    >>> ref = np.array([[0.0, 0.0], [1.0, 2.0], [2.0, 1.0], [3.0, 3.0]])
    >>> v = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> block, _ = BlockSorted.fit(np.ascontiguousarray(ref.T), v, 0, 2)
    >>> summary = DepthSummary(np.zeros(2), v, [block], 4)
    >>> top = least_deep(summary, np.array([[1.5, 9.0], [np.nan, 0.0]]), 2)
    >>> top.direction.tolist(), top.depth.tolist(), top.side.tolist()
    ([[1, 0], [-1, -1]], [[0.0, 0.5], [nan, nan]], [[1, 0], [0, 0]])
    """
    if not (isinstance(k, (int, np.integer)) and 1 <= k):
        raise ValueError(f"k={k!r}: the number of directions per row must be a positive integer")
    rows, slots, n = summary_slots(summary, x, valid, scales, int(k))
    return expand_top(rows, top_of_slots(slots, n, int(k)))


def summary_slots(summary: Any, x: np.ndarray, valid: np.ndarray | None,
                  scales: np.ndarray | None,
                  k: int) -> tuple[Rows, tuple[np.ndarray, ...], int | None]:
    """The rows of ``x`` prepared, their ``k`` first slots over the whole summary, and the
    divisor of the slots' values (``n`` for counts, None for the projection depth's depths).
    """
    inv = inverse_scales(scales, summary.directions.shape[0])
    if isinstance(summary, ProjectionSummary):
        rows = prepare_rows(x, summary.location, valid, order=False)
        return rows, summary.top_slots(rows, inv, k), None
    rows = prepare_rows(x, summary.location, valid)
    return rows, block_top(rows, summary.directions, inv, k, summary.blocks), summary.n


def explain_summary(summary: Any, x: np.ndarray, valid: np.ndarray, scales: np.ndarray,
                    k: int) -> np.ndarray:
    """:func:`explain_packed` of the rows of ``x`` with the whole summary (in this process)."""
    rows, slots, n = summary_slots(summary, x, valid, scales, k)
    deepest = DEEPEST_PROJECTION if n is None else DEEPEST_COUNT
    return explain_packed(rows, slots, n, summary.directions, scales, k, deepest)


def inverse_scales(scales: np.ndarray | None, m: int) -> np.ndarray:
    """``1 / scales`` where positive, 0 elsewhere (and everywhere without ``scales``)."""
    inv = np.zeros(m)
    if scales is not None:
        np.divide(1.0, scales, out=inv, where=scales > 0)
    return inv


def block_top(rows: Any, directions: np.ndarray, inv: np.ndarray, k: int,
              blocks: list[Any]) -> tuple[np.ndarray, ...]:
    """Each row of ``rows.x``'s ``k`` first slots over the directions of ``blocks``.

    The slots of :func:`daskdepth.kernels.top.empty_top`; slots of disjoint
    sets of blocks merge exactly, in any order
    (:func:`daskdepth.kernels.top.merge_top`).
    """
    slots = empty_top(rows.x.shape[0], min(k, directions.shape[0]))
    for b in blocks:
        b.top_into(rows.x, np.ascontiguousarray(directions[b.j0:b.j1]), rows.valid, slots,
                   np.ascontiguousarray(inv[b.j0:b.j1]))
    return slots


def top_of_slots(slots: tuple[np.ndarray, ...], n: int | None, k: int) -> TopDirections:
    """The slots as directions, depths (counts over ``n``; the values where ``n`` is None)
    and sides, padded to ``k``.

    Empty slots (rows not scored, or fewer directions than ``k``) get -1, NaN and 0.
    """
    value, _, direction, side = slots
    unset = direction == NO_DIRECTION
    depth = value if n is None else value / n
    out = TopDirections(np.where(unset, -1, direction), np.where(unset, np.nan, depth),
                        np.where(unset, 0, side).astype(np.int8))
    pad = k - value.shape[1]
    if pad > 0:
        out = TopDirections(np.pad(out.direction, ((0, 0), (0, pad)), constant_values=-1),
                            np.pad(out.depth, ((0, 0), (0, pad)), constant_values=np.nan),
                            np.pad(out.side, ((0, 0), (0, pad))))
    return out


def expand_top(rows: Any, top: TopDirections) -> TopDirections:
    """``top`` of the rows of ``rows.x`` back to the chunk's rows (empty where not scored)."""
    return TopDirections(_expand(rows, top.direction, -1), _expand(rows, top.depth, np.nan),
                         _expand(rows, top.side, 0))


def explain_packed(rows: Any, slots: tuple[np.ndarray, ...], n: int | None,
                   directions: np.ndarray, scales: np.ndarray, k: int,
                   deepest: float = DEEPEST_COUNT) -> np.ndarray:
    """``(chunk rows, 3 k + d)``: directions, depths, sides and contributions, side by side.

    From the slots of the rows of ``rows.x`` (:func:`block_top`, or
    :func:`summary_slots`; ``n`` as for :func:`top_of_slots`, ``deepest`` as
    for :func:`contributions`); the contributions are computed on those rows
    (each row's own arithmetic) and copied to their duplicates.  One float64
    array, so that a chunk's task has one result; direction indices and sides
    are exact in float64.
    """
    top = top_of_slots(slots, n, k)
    contrib = contributions(rows.x, directions, scales, top, deepest)
    top = expand_top(rows, top)
    return np.concatenate([top.direction.astype(np.float64), top.depth,
                           top.side.astype(np.float64), _expand(rows, contrib, np.nan)], axis=1)


def _expand(rows: Any, values: np.ndarray, fill: Any) -> np.ndarray:
    """Per-row ``values`` (rows of ``rows.x``) back to the chunk's rows, ``fill`` elsewhere."""
    if rows.inverse is None:
        out = values.copy()
        out[~rows.valid] = fill
        return out
    out = np.full((rows.n_rows,) + values.shape[1:], fill, dtype=values.dtype)
    keep = rows.inverse >= 0
    out[keep] = values[rows.inverse[keep]]
    return out


def direction_scales(directions: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """Standard deviation ``sqrt(v_j' C v_j)`` of the reference projections on each direction.

    Computed row by row in a fixed order, so that it does not depend on how
    many directions there are.  A direction along which the reference rows do
    not vary gets 0.

    Examples
    --------
    >>> direction_scales(np.array([[1.0, 0.0], [0.0, 0.5]]), np.diag([4.0, 1.0])).tolist()
    [2.0, 0.5]
    """
    cv = directions @ covariance
    var = np.einsum("jf,jf->j", cv, directions)
    return np.sqrt(np.maximum(var, 0.0))


def feature_axes(directions: np.ndarray, covariance: np.ndarray, whitened: bool) -> np.ndarray:
    """Each direction as a unit vector in the features' space (rows).

    A direction ``v_j`` projects a row ``x`` to ``<x - location, v_j>``.  Without
    whitening (IRW, the halfspace depth) ``v_j`` is itself a unit vector of the
    features' space.  With whitening (AI-IRW), ``v_j = W u_j`` is the whitened
    direction ``u_j`` as a linear form; in the features' space that direction
    is ``W^-T u_j = C v_j`` (``W W^T = C^-1``), the displacement along which
    the projection grows fastest per Mahalanobis unit, normalised here.

    Examples
    --------
    >>> feature_axes(np.array([[0.5, 0.0]]), np.diag([4.0, 1.0]), True).tolist()
    [[1.0, 0.0]]
    """
    axes = directions @ covariance if whitened else directions.copy()
    norm = np.sqrt(np.einsum("jf,jf->j", axes, axes))
    return axes / np.where(norm > 0, norm, 1.0)[:, None]


def contributions(xc: np.ndarray, directions: np.ndarray, scales: np.ndarray,
                  top: TopDirections, deepest: float = DEEPEST_COUNT) -> np.ndarray:
    """Per-feature contributions (rows, d) of the centred rows ``xc`` to their outlyingness.

    With ``j_q`` the row's ``q``-th least-deep direction, ``D_q`` its univariate
    depth, ``s_q`` its side and ``sigma_q`` the spread of the reference
    projections on it (:func:`direction_scales`), feature ``f`` contributes
    ``sum_q w_q s_q xc_f v_{j_q f} / sigma_q`` with weights
    ``w_q = max(deepest - D_q, 0)`` normalised to add up to 1 (equal weights
    when they are all 0): ``deepest`` is the largest univariate depth, 1/2 for
    ``min(L, G) / n`` (:data:`DEEPEST_COUNT`), 1 for the projection depth
    (:data:`DEEPEST_PROJECTION`), so a direction counts for how far the row is
    from that direction's deepest point.  ``xc_f v_{jf}`` is feature ``f``'s term of the row's
    projection, so the contributions add up to ``sum_q w_q s_q <xc, v_{j_q}> /
    sigma_q``: the row's distance from the location along its least-deep
    directions, signed towards the side it lies on, in standard deviations of
    the reference projections, averaged with more weight on the less deep
    directions.  Rows not scored get NaN.  The sums run over ``q`` in order,
    so each row's values do not depend on the other rows.
    """
    n_rows, d = xc.shape
    k = top.direction.shape[1]
    filled = top.direction >= 0
    weight = np.where(filled, np.maximum(deepest - np.where(filled, top.depth, deepest), 0.0),
                      0.0)
    total = np.zeros(n_rows)
    for q in range(k):
        total += weight[:, q]
    flat = (total == 0) & filled[:, 0]
    count = np.zeros(n_rows)
    for q in range(k):
        count += filled[:, q]
    weight = np.where(flat[:, None], filled / np.maximum(count, 1.0)[:, None],
                      weight / np.where(total > 0, total, 1.0)[:, None])
    out = np.zeros((n_rows, d))
    for q in range(k):
        j = np.maximum(top.direction[:, q], 0)
        sigma = scales[j]
        factor = np.where(filled[:, q] & (sigma > 0),
                          weight[:, q] * top.side[:, q] / np.where(sigma > 0, sigma, 1.0), 0.0)
        with np.errstate(invalid="ignore"):  # rows not scored (inf) are set to NaN below
            out += factor[:, None] * (xc * directions[j])
    out[~filled[:, 0]] = np.nan
    return out


def depth_profile(summary: Any, j: int, t: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """Univariate depth ``min(L, G) / n`` along direction ``j`` at the projections ``t``.

    The values the summary gives a row whose centred projection on ``v_j`` is
    ``t`` (the exact counts of sorted projections, a leaf summary's tabulated
    ones), and the range ``(lo, hi)`` of the reference projections.  For a
    :class:`~daskdepth.summary.projection.ProjectionSummary`, which keeps no
    reference projections, the depth ``1 / (1 + |t - med_j| / mad_j)`` and
    the range ``med_j -+ 4 mad_j`` (where that depth is 1/5).

    Examples
    --------
    >>> from daskdepth.summary.depth import DepthSummary
    >>> from daskdepth.summary.sorted import BlockSorted
    >>> block, _ = BlockSorted.fit(np.array([[0.0, 1.0, 2.0, 3.0]]), np.array([[1.0]]), 0, 1)
    >>> depth, span = depth_profile(DepthSummary(np.zeros(1), np.ones((1, 1)), [block], 4), 0,
    ...                             np.array([-1.0, 1.0, 1.5]))
    >>> depth.tolist(), span
    ([0.0, 0.5, 0.5], (0.0, 3.0))
    >>> from daskdepth.summary.projection import ProjectionSummary
    >>> pd_summary = ProjectionSummary(np.zeros(1), np.ones((1, 1)), np.ones(1), np.full(1, 0.5), 4)
    >>> depth, span = depth_profile(pd_summary, 0, np.array([1.0, 2.0]))
    >>> depth.tolist(), span
    ([1.0, 0.3333333333333333], (-1.0, 3.0))
    """
    if isinstance(summary, ProjectionSummary):
        return _projection_profile(summary, j, t)
    block = next((b for b in summary.blocks if b.j0 <= j < b.j1), None)
    if block is None:
        raise IndexError(f"direction {j} is not one of the summary's "
                         f"{summary.directions.shape[0]} directions")
    if is_handle(block):
        block = block.load()
    jj = j - block.j0
    t = np.asarray(t, dtype=np.float64)
    n = summary.n
    if isinstance(block, BlockSorted):
        s = block.values[jj]
        below = np.searchsorted(s, t, side="right")
        above = n - np.searchsorted(s, t, side="left")
        return np.minimum(below, above) / n, (float(s[0]), float(s[-1]))
    if isinstance(block, BlockLeaves):
        k0 = int(block.kptr[jj])
        cuts = block.keys[k0:k0 + int(block.cptr[jj + 1] - block.cptr[jj])]
        leaf = np.searchsorted(cuts, t, side="right")
        values = np.asarray(block.lut, dtype=np.float64)[block.lptr[jj] + leaf]
        return values / n, (float(cuts[0]), float(cuts[-1]))
    raise TypeError(f"a {type(block).__name__} has no univariate depth profile")


def _projection_profile(summary: ProjectionSummary, j: int,
                        t: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    if not 0 <= j < summary.directions.shape[0]:
        raise IndexError(f"direction {j} is not one of the summary's "
                         f"{summary.directions.shape[0]} directions")
    med, mad = float(summary.medians[j]), float(summary.mads[j])
    dev = np.abs(np.asarray(t, dtype=np.float64) - med)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mad > 0, dev / (mad if mad > 0 else 1.0),
                         np.where(dev > 0, np.inf, 0.0))
    return 1.0 / (1.0 + ratio), (med - 4.0 * mad, med + 4.0 * mad)
