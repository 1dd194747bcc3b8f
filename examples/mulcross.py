"""Rocke and Woodruff's ``mulcross`` generator, re-implemented step by step.

The Mulcross data set of the anomaly-detection benchmarks (262,144 x 4, 10%
anomalies in two clusters) was made with the ``mulcross`` program of
Rocke and Woodruff (1993-96; "Identification of Outliers in Multivariate
Data", JASA 91:1047-1061, 1996).  The distributed file could not be obtained
and its seed is unknown, so this module **regenerates** data from the same
distribution with the same algorithm; the values are not those of the
original file.  See ``../shared/data/odds/PROVENANCE.md``.

The program, as re-implemented here:

* uniforms come from the Park-Miller minimal-standard generator
  (``seed <- 16807 * seed mod (2^31 - 1)``, ``U = seed / (2^31 - 1)``);
  normals from the Marsaglia polar method, using one value of each pair;
* all ``N x P`` entries are drawn i.i.d. N(0, 1), row by row;
* the last ``m = floor(A * N + 0.5)`` rows are overwritten by outliers: every
  ``m // K`` outlier rows a new direction with coordinates +-1 (``U > 0.5``
  gives -1) is drawn, and each coordinate is N(PollDist * dir_j, Lambda) with
  ``PollDist = D * sqrt(chi2_{P;0.999} / P)`` (the program's table value,
  18.5 for P = 4) and the "crossover" variance
  ``Lambda = (1-A)(A P - (1-A)) / (A((1-A) P - A))``, floored at 0.01;
* the whole sample is centred and multiplied by the lower Cholesky factor of
  ``(X^T X)^{-1}`` and by ``sqrt(N - 1)``, so that its sample covariance is
  exactly the identity;
* the rows are shuffled with the same generator (draw position
  ``floor(U * remaining)`` from the list of rows not yet drawn) and written
  with 11 decimals (``%14.11lf``).

The original program writes no labels; here a row is an anomaly when it was
one of the last ``m`` rows before the shuffle.  Parameters of the ODDS file:
``P=4, N=262144, A=0.1, D=2, K=2``.

Run ``python examples/mulcross.py`` to write ``mulcross.npz`` (keys X, y).
"""

from __future__ import annotations

import argparse
import math

import numba
import numpy as np

_M = 2147483647

#: Upper 0.001 points of chi-square, the program's table.
_CHI2_999 = {1: 10.8, 2: 13.8, 3: 16.3, 4: 18.5, 5: 20.5, 6: 22.5, 7: 24.3, 8: 26.1, 9: 27.9,
             10: 29.6, 11: 31.3, 12: 32.9, 13: 34.5, 14: 36.1, 15: 37.7, 16: 39.3, 17: 40.8,
             18: 43.3, 19: 43.8, 20: 45.3, 25: 52.6, 50: 86.7, 100: 149.4}


def chi2_999(p: int) -> float:
    """The program's upper 0.001 chi-square point (table, else its approximation)."""
    if p in _CHI2_999:
        return _CHI2_999[p]
    return p * (1 - 2 / (9 * p) + 0.6745 * math.sqrt(2 / (9 * p))) ** 3


@numba.njit(cache=True)
def _uniform(state):
    s = state[0]
    while True:
        s = (16807 * s) % _M
        if s != 0:
            break
    state[0] = s
    return s / _M


@numba.njit(cache=True)
def _normal(mu, sd, state):
    while True:
        v1 = 2.0 * _uniform(state) - 1.0
        v2 = 2.0 * _uniform(state) - 1.0
        r = v1 * v1 + v2 * v2
        if r < 1.0:
            break
    return mu + sd * (v1 * math.sqrt(-2.0 * math.log(r) / r))


@numba.njit(cache=True)
def _draw(n, p, m, k, poll_dist, lam, state):
    x = np.empty((n, p))
    for i in range(n):
        for j in range(p):
            x[i, j] = _normal(0.0, 1.0, state)
    direction = np.empty(p)
    start = n - m
    per = m // k
    sd = math.sqrt(lam)
    for i in range(start, n):
        if (i - start) % per == 0:
            for j in range(p):
                direction[j] = -1.0 if _uniform(state) > 0.5 else 1.0
        for j in range(p):
            x[i, j] = _normal(poll_dist * direction[j], sd, state)
    return x


@numba.njit(cache=True)
def _permutation(n, state):
    """The program's shuffle: position floor(U * remaining) of the rows left, in order.

    A Fenwick tree finds the k-th row not yet drawn in O(log n).
    """
    tree = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        tree[i] += 1
        j = i + (i & -i)
        if j <= n:
            tree[j] += tree[i]
    top = 1
    while top * 2 <= n:
        top *= 2
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = int(_uniform(state) * (n - i))  # 0-based rank among the rows left
        pos = 0
        step = top
        rem = k + 1
        while step > 0:
            nxt = pos + step
            if nxt <= n and tree[nxt] < rem:
                pos = nxt
                rem -= tree[nxt]
            step //= 2
        row = pos + 1  # 1-based
        out[i] = row - 1
        j = row
        while j <= n:
            tree[j] -= 1
            j += j & -j
    return out


def mulcross(p: int = 4, n: int = 262144, contamination: float = 0.1, distance: float = 2.0,
             clusters: int = 2, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """Draw a Mulcross sample.

    Parameters
    ----------
    p, n : int
        Features and rows.
    contamination : float
        Share of outliers ``A`` (at most one half).
    distance : float
        Distance factor ``D`` of the outlier clusters.
    clusters : int
        Number of outlier clusters ``K``.
    seed : int
        Seed of the Park-Miller generator (1 to 2^31 - 2).

    Returns
    -------
    X : ndarray of shape (n, p)
        Standardised rows, rounded to 11 decimals as the program writes them.
    y : ndarray of shape (n,), int8
        1 for the outliers.
    """
    m = int(contamination * n + 0.5)
    if n <= p or not 0 < m <= n // 2 or clusters < 1 or not 0 < seed < _M:
        raise ValueError("need n > p, 0 < contamination * n <= n / 2, clusters >= 1 and "
                         "0 < seed < 2^31 - 1")
    a = contamination
    lam = (1 - a) * (a * p - (1 - a)) / (a * ((1 - a) * p - a))
    lam = max(lam, 0.01)
    poll_dist = distance * math.sqrt(chi2_999(p) / p)
    state = np.array([seed], dtype=np.int64)
    x = _draw(n, p, m, clusters, poll_dist, lam, state)
    xc = x - x.mean(axis=0)
    chol = np.linalg.cholesky(np.linalg.inv(xc.T @ xc))
    x = xc @ chol * math.sqrt(n - 1)
    perm = _permutation(n, state)
    y = (perm >= n - m).astype(np.int8)
    return np.round(x[perm], 11), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--out", default="mulcross.npz")
    args = parser.parse_args()
    x, y = mulcross(seed=args.seed)
    np.savez_compressed(args.out, X=x, y=y)
    print(f"wrote {args.out}: {x.shape[0]} x {x.shape[1]}, {int(y.sum())} anomalies "
          "(regenerated with the mulcross algorithm, not the ODDS file)")


if __name__ == "__main__":
    main()
