"""Half-space mass kernels: projections of subsamples and the score of rows (NumPy/Numba, no Dask).

A fitted half-space mass (Chen, Ting, Washio & Haffari, 2015) is ``t``
half-spaces, each a direction ``v_j``, a split point ``s_j`` on it and the
share ``left_j`` of its subsample whose projection is below ``s_j``.  The mass
of a point ``x`` along ``j`` is ``left_j`` when ``<x - mu, v_j> < s_j`` and
``1 - left_j`` otherwise; its score is the mean over the half-spaces.  Fitting
and scoring project with the same function (:func:`centred_dot`, features
summed in order), so a subsample row scored later falls on the side it was
counted on.
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel


@kernel
def centred_dot(xc, v, j):
    """``<xc, v[j]>``, the products summed feature by feature in order."""
    acc = 0.0
    for k in range(xc.size):
        acc += xc[k] * v[j, k]
    return acc


@kernel
def subsample_projections(x, location, v, rows):
    """``out[j, i] = <x[rows[j, i]] - location, v[j]>``: half-space ``j``'s subsample projected."""
    t, psi = rows.shape
    d = x.shape[1]
    out = np.empty((t, psi))
    xc = np.empty(d)
    for j in range(t):
        for i in range(psi):
            r = rows[j, i]
            for k in range(d):
                xc[k] = x[r, k] - location[k]
            out[j, i] = centred_dot(xc, v, j)
    return out


@kernel
def mass_scores(xc, v, split, left, valid, out):
    """Mean over the half-spaces of the mass on each centred row's side; NaN where not ``valid``.

    Row ``r`` gets ``(1/t) sum_j (left[j] if <xc[r], v[j]> < split[j] else
    1 - left[j])``, summed over ``j`` in order.  ``xc`` holds rows minus the
    fitted location (one subtraction each, as :func:`subsample_projections`).
    """
    nr = xc.shape[0]
    t = v.shape[0]
    right = 1.0 - left
    for r in range(nr):
        if not valid[r]:
            out[r] = np.nan
            continue
        row = xc[r]
        acc = 0.0
        for j in range(t):
            if centred_dot(row, v, j) < split[j]:
                acc += left[j]
            else:
                acc += right[j]
        out[r] = acc / t
