"""The invariant frame of AI-IRW: whitened moments of rows and the basis they fix (NumPy).

AI-IRW draws directions ``v = W u`` with ``W W^T = Sigma^-1`` and ``u`` uniform
on the sphere.  ``W`` is fixed only up to a rotation: for ``A x + b`` the
whitened rows are a rotation ``R`` of those of ``x``, and ``m`` fixed vectors
``u`` do not rotate with them, so at finite ``m`` the depth is not affine
invariant.  The invariant frame removes the rotation: in whitened coordinates
``z`` it takes the eigenvectors ``F`` of the fourth-moment scatter
``E[|z|^2 z z^T]`` (which rotates as ``R^T S R``), with signs that make the
third-moment criterion ``e . E[|z|^2 z]`` positive, and draws ``v = W F u``.
Then ``W_y F_y = A^-T W_x F_x``: the projections of ``A x + b`` on its
directions are those of ``x`` on its own, up to rounding (invariant
coordinate selection, Tyler, Critchley, Duembgen & Oja, JRSS-B 2009).

Every matrix that decides the frame is rounded to ``2**-36`` in units where
it is about the identity (:func:`canonical`), so that chunking noise (last
bits) cannot move a direction, as
:func:`daskdepth.kernels.whitening.canonical_covariance` does for the
covariance; the rounding happens in whitened coordinates, where it costs the
invariance nothing measurable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .moments import Moments, merge_weighted, moments_of
from .selection import chunk_distances
from .whitening import CANONICAL_BITS, whiten

#: The covariance refined in whitened coordinates is used without a second pass
#: when it differs from the identity by at most this (max-abs) after rounding;
#: the fourth-moment scatter of the first pass is then corrected to first order
#: (an error of about this size, against eigenvalue gaps of at least ``TIE_RTOL``).
ONE_PASS_TOL = 2.0 ** -32

#: Eigenvalues of the normalised fourth-moment scatter (mean eigenvalue 1) closer
#: than this are tied: their eigenvectors are not determined by the scatter.
TIE_RTOL = 1e-6

#: A sign criterion ``e . g`` (with ``g = E[|z|^2 z] / sqrt(E[|z|^6])``, at most 1 in
#: absolute value) at most this large does not decide the sign of ``e``.
SIGN_TOL = 2.0 ** -30

#: The sign criteria are perturbed by the rounding of the whitened rows; one within
#: this many times that perturbation's first-order estimate (:func:`frame_noise`,
#: :func:`invariant_frame`) is a near-tie: an affine image of the data may decide it the
#: other way.  The estimate takes the rows as independent and isotropic; measured with
#: the criteria of ``X`` and ``A X + b`` (maps of condition 1e4) against the sum of the
#: two fits' estimates: nearly singular Gaussian rows (a feature the sum of two others
#: plus 1e-9 noise, d = 12) differed by up to 6.9 times it, Student-4 rows by 2.1, with
#: an offset of 1e3 (1e-7 noise, d = 8) by 0.95; breast cancer under a map of condition
#: 1e8 by 0.2 (sample covariance) and 0.08 (MCD, whose smallest criterion, 1.4e-7, is
#: within twice the largest change of the others and is reported).  The margin weighs
#: missing a near-tie against warning about a sign that is in fact decided.
NOISE_MARGIN = 4.0


class Support(NamedTuple):
    """The rows a covariance is computed from: ``||(x - location) @ whitening||^2 < threshold``.

    (The reweighting of the MCD keeps the rows whose raw robust distance is below
    a threshold.)
    """

    location: np.ndarray
    whitening: np.ndarray
    threshold: float


@dataclass
class FrameMoments:
    """Moments of whitened rows ``z = (x - location) @ w`` (mergeable).

    ``rows`` are the count, mean and centred scatter of ``z`` over the rows
    the covariance is computed from (None when not asked for); the other
    fields are sums over all finite rows: ``n``, ``fourth = sum |z|^2 z z^T``,
    ``third = sum |z|^2 z`` and ``sixth = sum |z|^6``; ``noise`` holds
    ``sum |z|^4 e^2``, ``sum |z|^6 e^2`` and ``sum |z|^2 e^2`` (over the
    covariance's rows when ``rows`` are asked for) with ``e^2`` a row's rounding
    variance in whitened units and ``squares`` the sums ``x_f^2 + location_f^2``
    per feature (:func:`frame_chunk`), from which :func:`frame_noise` estimates
    how much rounding perturbs ``third`` and ``fourth``.
    """

    rows: Moments | None
    n: float
    fourth: np.ndarray
    third: np.ndarray
    sixth: float
    noise: np.ndarray = field(default_factory=lambda: np.zeros(3))
    squares: np.ndarray | None = None


def frame_chunk(x: np.ndarray, location: np.ndarray, w: np.ndarray, rows: bool,
                support: Support | None) -> FrameMoments:
    """:class:`FrameMoments` of the finite rows of one chunk.

    ``rows`` asks for the moments over the covariance's rows: all finite rows,
    or those inside ``support``.  A row's rounding in whitened units has the
    variance ``e^2 = eps^2 * sum_f (x_f^2 + location_f^2) * |w_f|^2`` (``w_f``
    the row of ``w`` for feature ``f``): the rounding of the stored values and
    of the arithmetic that whitens them, independent over the features, which
    a nearly singular or ill-conditioned ``w`` amplifies.
    """
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x).all(axis=1)
    xv = x if finite.all() else x[finite]
    z = (xv - location) @ w
    r2 = np.einsum("ij,ij->i", z, z)
    zr = z * r2[:, None]
    sq = xv * xv + location * location
    e2 = sq @ (np.einsum("ij,ij->i", w, w) * np.finfo(np.float64).eps ** 2)
    r2e2 = r2 * r2 * e2
    moments = None
    keep = None
    if rows:
        if support is not None:
            keep = chunk_distances(xv, support.location, support.whitening) < support.threshold
        moments = moments_of(z, keep)
    # the third sum over the covariance's rows (all finite rows unless a support is given)
    noise = np.array([r2e2.sum(), r2e2 @ r2, r2 @ e2 if keep is None else r2[keep] @ e2[keep]])
    return FrameMoments(moments, float(xv.shape[0]), zr.T @ z, zr.sum(axis=0),
                        float(r2 @ (r2 * r2)), noise, sq.sum(axis=0))


def frame_merge(*parts: FrameMoments) -> FrameMoments:
    """Merge chunk moments: Chan et al. for the rows' moments, sums for the rest.

    The sums' last bits depend on the merge order; :func:`canonical` rounding
    of what is derived from them absorbs that.
    """
    out = parts[0]
    for p in parts[1:]:
        rows = None if out.rows is None else merge_weighted(out.rows, p.rows)
        out = FrameMoments(rows, out.n + p.n, out.fourth + p.fourth, out.third + p.third,
                           out.sixth + p.sixth, out.noise + p.noise,
                           None if out.squares is None else out.squares + p.squares)
    return out


def canonical(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to multiples of ``2**-CANONICAL_BITS`` (for arrays of order 1)."""
    step = 2.0 ** -CANONICAL_BITS
    return np.round(np.asarray(a, dtype=np.float64) / step) * step


def inverse_sqrt(k: np.ndarray) -> np.ndarray:
    """Symmetric inverse square root of a symmetric positive definite ``k``."""
    vals, vecs = np.linalg.eigh((k + k.T) / 2)
    if not (vals > 0).all():
        raise ValueError(  # the whitened covariance is near the identity by construction
            "daskdepth internal error: the covariance in whitened coordinates is not positive "
            "definite; please report this with the data's shape and covariance option"
        )
    return (vecs / np.sqrt(vals)) @ vecs.T


def row_covariance(rows: Moments, factor: float, ddof: int) -> np.ndarray:
    """``factor * scatter / (count - ddof)`` of the covariance's rows."""
    return rows.scatter * (factor / max(rows.count - ddof, 1.0))


def fourth_moment_scatter(fm: FrameMoments,
                          k_inv_sqrt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Normalised fourth-moment scatter and third-moment vector, rounded (:func:`canonical`).

    ``S = E[|z|^2 z z^T]`` divided by its mean eigenvalue and
    ``g = E[|z|^2 z] / sqrt(E[|z|^6])`` (so ``|g| <= 1``).  When the rows
    were whitened with ``W0`` whose covariance is ``K`` (near the identity),
    ``k_inv_sqrt = K^-1/2`` maps both to the exact whitening ``W0 K^-1/2`` to
    first order in ``K - I``.
    """
    n = max(fm.n, 1.0)
    s = fm.fourth / n
    g = fm.third / n
    if k_inv_sqrt is not None:
        s = k_inv_sqrt @ s @ k_inv_sqrt
        g = k_inv_sqrt @ g
    scale = np.trace(s) / s.shape[0]
    if not scale > 0:  # every row at the location: no direction is special
        return np.eye(s.shape[0]), np.zeros(s.shape[0])
    s = canonical((s + s.T) / (2 * scale))
    g_scale = np.sqrt(fm.sixth / n)
    return s, canonical(g / g_scale) if g_scale > 0 else np.zeros_like(g)


class FrameNoise(NamedTuple):
    """How much rounding perturbs the criteria of :func:`fourth_moment_scatter` (variances).

    In the units of ``g`` and ``s`` there: ``g2 * p`` is the variance of ``g``
    along a unit vector ``e`` with ``p = e' profile e`` (``profile``, of trace
    1, is the shape of the rows' rounding in whitened coordinates); ``s2a`` and
    ``s2b`` give that of the entries of ``s``, ``k2`` that of the entries of
    the covariance ``K`` the whitening is refined by (0 when ``K`` does not
    come from the rows) and ``c2 * p`` that of ``g`` from the rounding of the
    location the rows are centred on, which does not average out over the
    rows (see :func:`invariant_frame`).
    """

    g2: float
    s2a: float
    s2b: float
    profile: np.ndarray
    k2: float = 0.0
    c2: float = 0.0


def frame_noise(fm: FrameMoments, w: np.ndarray, location: np.ndarray) -> FrameNoise:
    """:class:`FrameNoise` of the moments ``fm`` of the rows ``(x - location) @ w`` (w: d x r).

    Rounding perturbs each whitened row by ``dz`` with variance ``e^2`` (see
    :func:`frame_chunk`) spread as ``profile = w' diag(q) w`` (normalised; ``q``
    the features' mean ``x_f^2 + location_f^2``), so ``|z|^2 z`` by about
    ``|z|^2 dz`` and ``|z|^2 z z'`` by about ``|z|^2 (dz z' + z dz') + 2 (z . dz) z z'``,
    independently over the rows.  For well-conditioned data the standard
    deviations are about ``1e-16``; for nearly singular data whitening
    amplifies the rounding by the inverse of the smallest singular value.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(1000, 3))
    >>> loc = x.mean(axis=0)
    >>> noise = frame_noise(frame_chunk(x, loc, np.eye(3), False, None), np.eye(3), loc)
    >>> bool(noise.g2 < 1e-30)
    True
    >>> x[:, 2] = x[:, 0] + x[:, 1] + 1e-9 * rng.normal(size=1000)
    >>> w = np.linalg.inv(np.linalg.qr(x - x.mean(axis=0), mode="r")) * np.sqrt(1000)
    >>> noise = frame_noise(frame_chunk(x, x.mean(axis=0), w, False, None), w, x.mean(axis=0))
    >>> bool(1e-20 < noise.g2 < 1e-12)
    True
    """
    n = max(fm.n, 1.0)
    r = fm.third.shape[0]
    g_scale2 = fm.sixth / n
    s_scale = float(np.trace(fm.fourth)) / (n * max(r, 1))
    profile = np.eye(r) / max(r, 1)
    if fm.squares is not None and r:
        p = w.T @ (w * (fm.squares / n)[:, None])
        if np.isfinite(p).all() and np.trace(p) > 0:
            profile = p / np.trace(p)
    with np.errstate(all="ignore"):
        g2 = fm.noise[0] / (n * n * g_scale2) if g_scale2 > 0 else 0.0
        s2a = fm.noise[0] / (n * s_scale) ** 2 if s_scale > 0 else 0.0
        s2b = fm.noise[1] / (n * s_scale) ** 2 if s_scale > 0 else 0.0
        count = max(fm.rows.count, 1.0) if fm.rows is not None else n
        k2 = fm.noise[2] / (count * count)
        # the location is rounded to about eps |location_f| (compensated sums): a shift
        # c of every row moves E[|z|^2 z] by E[2 z z' + |z|^2] c, about (r + 2) c
        shift2 = (location * location) @ np.einsum("ij,ij->i", w, w) * np.finfo(
            np.float64).eps ** 2
        c2 = (r + 2) ** 2 * shift2 / g_scale2 if g_scale2 > 0 else 0.0
    g2, s2a, s2b, k2, c2 = (float(v) if np.isfinite(v) else 0.0
                            for v in (g2, s2a, s2b, k2, c2))
    return FrameNoise(g2, s2a, s2b, profile, k2, c2)


def _power_of_two_above(value: np.ndarray) -> np.ndarray:
    """``value`` rounded up to powers of two (0 stays 0), so that last bits do not move it."""
    value = np.asarray(value, dtype=np.float64)
    mant, expo = np.frexp(value)
    return np.where(value > 0, np.ldexp(np.ones_like(value), expo + (mant > 0.5)), 0.0)


@dataclass
class FrameReport:
    """What decided the frame, and where it is not unique.

    ``eigenvalues`` of the normalised fourth-moment scatter (descending);
    ``tied`` the groups of indices (into the frame's columns) whose eigenvalues
    are within :data:`TIE_RTOL`; ``unsigned`` the columns whose third-moment
    criterion is within ``sign_tol`` (per column) of zero: their sign is that of
    the criterion (the eigensolver's where it is 0), and an affine image of the
    data may get the other one.  ``sign_tol`` is :data:`SIGN_TOL` unless
    rounding perturbs the criterion more (:func:`invariant_frame`); then
    ``numerical`` is true.
    """

    eigenvalues: np.ndarray
    tied: list[list[int]]
    unsigned: list[int]
    sign_tol: np.ndarray | None = None

    @property
    def unique(self) -> bool:
        return not self.unsigned and all(len(t) < 2 for t in self.tied)

    @property
    def numerical(self) -> bool:
        """Whether an undecided sign is undecided by rounding (not by an exact symmetry)."""
        if self.sign_tol is None:
            return False
        return bool(any(self.sign_tol[k] > SIGN_TOL for k in self.unsigned))


def invariant_frame(s: np.ndarray, g: np.ndarray,
                    noise: FrameNoise | None = None) -> tuple[np.ndarray, FrameReport]:
    """The orthonormal frame ``F`` (r x r, columns) fixed by ``s`` and ``g``.

    Columns are the eigenvectors of ``s`` by decreasing eigenvalue, each with
    the sign that makes ``e . g`` positive.  Within a group of tied
    eigenvalues (within :data:`TIE_RTOL`) the eigenvectors are not determined
    by ``s``: the first column of the group is taken along the projection of
    ``g`` on the group's eigenspace (an equivariant choice) when that
    projection is not negligible, and the rest stay as the eigensolver returns
    them; the report says so.

    A sign criterion ``c_k = e_k . g`` is decided only when it exceeds its own
    perturbation by rounding (``noise``, from :func:`frame_noise`): to first
    order ``|dc_k| <= dg_k + sum_l ds_kl |c_l| / |lambda_k - lambda_l|`` over
    the columns ``l`` outside ``k``'s tied group (``g`` moves, and ``e_k`` turns
    towards the other eigenvectors, the more the closer their eigenvalues),
    with the standard deviations ``dg_k = sqrt(g2 (p_k + 4 / r^2) + c2 p_k + sum_l
    dk_kl^2 c_l^2 / 4)`` and ``ds_kl = sqrt(s2a (p_k lambda_l + lambda_k p_l) / r +
    4 s2b lambda_k lambda_l / r^3 + dk_kl^2 ((lambda_k + lambda_l) / 2)^2)``,
    ``dk_kl = sqrt(k2 (p_k + p_l) / r)`` the refining covariance's (``W = W0
    K^-1/2`` turns ``g`` and ``s`` with ``K``), ``p_k`` the rounding's share
    along ``e_k``, and the rows' weight along ``e_k`` taken from its eigenvalue
    (the rows are otherwise taken as isotropic in whitened coordinates).  A
    criterion within :data:`NOISE_MARGIN` times that (rounded up to a power of
    two, and at least :data:`SIGN_TOL`) still sets the sign when it is not 0,
    and the report lists the column.

    Examples
    --------
    >>> f, report = invariant_frame(np.diag([1.0, 3.0]), np.array([0.5, -0.25]))
    >>> f
    array([[ 0.,  1.],
           [-1.,  0.]])
    >>> report.unique
    True
    >>> noise = FrameNoise(1e-12, 0.0, 0.0, np.eye(2) / 2)
    >>> invariant_frame(np.diag([1.0, 3.0]), np.array([0.5, -1e-6]), noise)[1].unsigned
    [0]
    """
    r = s.shape[0]
    vals, vecs = np.linalg.eigh(s)
    vals, vecs = vals[::-1], vecs[:, ::-1].copy()
    groups: list[list[int]] = [[0]] if r else []
    for k in range(1, r):
        if vals[groups[-1][-1]] - vals[k] <= TIE_RTOL:
            groups[-1].append(k)
        else:
            groups.append([k])
    unsigned: list[int] = []
    tied = [grp for grp in groups if len(grp) > 1]
    for grp in tied:
        q = vecs[:, grp]
        h = q @ (q.T @ g)
        size = float(np.linalg.norm(h))
        if size > SIGN_TOL:
            # the first axis along g's projection, the others completing it in the eigenspace
            h = h / size
            rest = np.linalg.svd(q - np.outer(h, h @ q), full_matrices=False)[0]
            vecs[:, grp] = np.column_stack([h, rest[:, :len(grp) - 1]])
    crit = vecs.T @ g
    member = np.zeros(r, dtype=np.int64)
    for i, grp in enumerate(groups):
        member[grp] = i
    gaps = np.abs(vals[:, None] - vals[None, :])
    apart = member[:, None] != member[None, :]
    tol = np.full(r, SIGN_TOL)
    if noise is not None and r:
        p = np.clip(np.einsum("ik,ij,jk->k", vecs, noise.profile, vecs), 0.0, None)
        pp = (p[:, None] + p[None, :]) / r
        dk2 = noise.k2 * pp
        dg = np.sqrt(noise.g2 * (p + 4.0 / r ** 2) + dk2 @ (crit * crit) / 4 + noise.c2 * p)
        lam = np.clip(vals, 0.0, None)  # E[|z|^2 z_k^2] in units of its mean over k
        ds = np.sqrt(noise.s2a * (p[:, None] * lam[None, :] + lam[:, None] * p[None, :]) / r
                     + 4.0 * noise.s2b * np.outer(lam, lam) / r ** 3
                     + dk2 * ((vals[:, None] + vals[None, :]) / 2) ** 2)
        turn = np.where(apart, ds * np.abs(crit)[None, :] / np.where(apart, gaps, 1.0), 0.0)
        tol = np.maximum(_power_of_two_above(NOISE_MARGIN * (dg + turn.sum(axis=1))), SIGN_TOL)
    for k in range(r):
        if crit[k] < 0:
            vecs[:, k] = -vecs[:, k]
        if abs(crit[k]) <= tol[k]:
            unsigned.append(k)
    return vecs + 0.0, FrameReport(vals, tied, unsigned, tol)  # + 0.0: no negative zeros


def invariant_coordinates(x: np.ndarray) -> np.ndarray | None:
    """``T`` (p x p) such that the coordinates ``(x - mean) @ T`` are affine invariant, or None.

    Invariant coordinate selection on rows held in memory: whitened by their
    covariance and rotated into their fourth-moment frame
    (:func:`invariant_frame`), so that ``A x + b`` has the same coordinates up
    to rounding (and up to the frame's ambiguities on data with exact
    symmetries).  None when the covariance is singular.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_exponential(size=(500, 3))
    >>> a = rng.normal(size=(3, 3))
    >>> y = x @ a.T + 5
    >>> u = (x - x.mean(axis=0)) @ invariant_coordinates(x)
    >>> v = (y - y.mean(axis=0)) @ invariant_coordinates(y)
    >>> bool(np.abs(u - v).max() < 1e-8)
    True
    """
    p = x.shape[1]
    loc = x.mean(axis=0)
    w, logdet = whiten(np.cov(x.T, bias=True).reshape(p, p))
    if not np.isfinite(logdet):
        return None
    f, _ = invariant_frame(*fourth_moment_scatter(frame_chunk(x, loc, w, False, None)))
    return w @ f
