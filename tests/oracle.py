"""Independent exact in-memory depth: argsort-free sorted search per direction.

Shares nothing with daskdepth but the definition: for each direction the
reference projections are sorted and the tie-aware counts #{<= q} and #{>= q}
come from binary searches.
"""

from __future__ import annotations

import numpy as np


def project(x: np.ndarray, location: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Centred projections (n, m), accumulated feature by feature."""
    xc = np.asarray(x, dtype=np.float64) - location
    p = np.zeros((xc.shape[0], directions.shape[0]))
    for k in range(xc.shape[1]):
        p += xc[:, k:k + 1] * directions[:, k]
    return p


def kernel_projections(x: np.ndarray, v: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(n_dir, n) projections as the routing kernels define them, by plain NumPy.

    ``((0.0 + x0 v0) + x1 v1) + ...`` feature by feature (a product, then a
    sum), overflows clamped to the largest finite float (NaN to the top), and
    0 for the rows not ``valid``.
    """
    top = np.finfo(np.float64).max
    p = np.zeros((v.shape[0], x.shape[0]))
    with np.errstate(all="ignore"):
        for j in range(v.shape[0]):
            acc = np.zeros(x.shape[0])
            for k in range(x.shape[1]):
                acc = acc + x[:, k] * v[j, k]
            p[j] = acc
    p[np.isnan(p)] = top
    np.clip(p, -top, top, out=p)
    p[:, ~valid] = 0.0
    return p


def direction_depths(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                     directions: np.ndarray) -> np.ndarray:
    """(n_points, m): min(#{i: p_ij <= q_j}, #{i: p_ij >= q_j}) / n for every direction j."""
    pr = project(reference, location, directions)
    pq = project(points, location, directions)
    n = pr.shape[0]
    out = np.empty((pq.shape[0], pr.shape[1]))
    for j in range(pr.shape[1]):
        s = np.sort(pr[:, j])
        le = np.searchsorted(s, pq[:, j], side="right")
        ge = n - np.searchsorted(s, pq[:, j], side="left")
        out[:, j] = np.minimum(le, ge) / n
    return out


def exact_depth(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                directions: np.ndarray) -> np.ndarray:
    """(1/m) sum_j min(#{i: p_ij <= q_j}, #{i: p_ij >= q_j}) / n."""
    return direction_depths(reference, points, location, directions).mean(axis=1)


def exact_depth_of_model(model, reference: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Exact depth for the fitted model's location and directions."""
    ref = np.asarray(reference, dtype=np.float64)
    ref = ref[np.isfinite(ref).all(axis=1)]
    return exact_depth(ref, points, model.location_, model.directions_)


def exact_halfspace_depth(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                          directions: np.ndarray) -> np.ndarray:
    """min_j min(#{i: p_ij <= q_j}, #{i: p_ij >= q_j}) / n: the random halfspace depth."""
    return direction_depths(reference, points, location, directions).min(axis=1)


def halfspace_mass(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                   directions: np.ndarray, subsamples: np.ndarray,
                   splits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 of Chen et al. (2015) given its random draws, in plain NumPy.

    Half-space ``j`` has the normal ``directions[j]``, the subsample
    ``reference[subsamples[j]]`` and the split point ``splits[j]`` on projections
    centred on ``location``.  Returns each half-space's mass below its split
    (the share of its subsample strictly below) and the mass of every point:
    the mean over half-spaces of the share of the subsample on the point's side
    (below, or at and above the split).
    """
    psi = subsamples.shape[1]
    left = np.empty(directions.shape[0])
    for j in range(directions.shape[0]):
        sub = project(reference[subsamples[j]], location, directions[j:j + 1])[:, 0]
        left[j] = np.count_nonzero(sub < splits[j]) / psi
    below = project(points, location, directions) < splits
    mass = np.where(below, left, 1.0 - left).mean(axis=1)
    return left, mass


def projection_depth(reference: np.ndarray, points: np.ndarray, location: np.ndarray,
                     directions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Projection depth over the given directions with NumPy's median, in plain NumPy.

    Returns each direction's median and MAD (unscaled median of the absolute
    deviations) of the reference projections, and the depth of every point,
    ``1 / (1 + max_j |q_j - med_j| / mad_j)``, a ratio with ``mad_j = 0`` taken
    as 0 at the median and infinite elsewhere.
    """
    pr = project(reference, location, directions)
    med = np.median(pr, axis=0)
    mad = np.median(np.abs(pr - med), axis=0)
    dev = np.abs(project(points, location, directions) - med)
    ratio = np.where(mad > 0, dev / np.where(mad > 0, mad, 1.0), np.where(dev > 0, np.inf, 0.0))
    return med, mad, 1.0 / (1.0 + ratio.max(axis=1))
