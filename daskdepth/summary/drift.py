"""The Liu-Singh quality index of a new batch against reference depths (NumPy only).

Liu and Singh (1993, JASA 88, "A quality index based on data depth and
multivariate rank tests") define, for a depth ``D`` fitted on a reference
sample ``X_1..X_m`` and a new sample ``Y_1..Y_n``,

    Q = (1/n) sum_j (1/m) #{i : D(X_i) <= D(Y_j)},

the mean over new rows of the share of reference rows that are at most as deep.
When both samples come from one distribution ``Q`` is near 1/2; a location or
scale change moves the new rows outwards, where few reference rows are less
deep, and ``Q`` falls below 1/2.

Here the reference depths are those of a keyed sample of ``s`` of the ``m``
reference rows (every row for small data).  Given the fitted depth function,
``n s Q`` is the Mann-Whitney statistic of the ``s`` sampled reference depths
against the ``n`` new depths, and under no change both are independent draws of
one law, so (continuous depths)

    Var(Q) = (s + n + 1) / (12 s n)  ~  (1/s + 1/n) / 12,

which is Liu and Singh's ``(1/m + 1/n) / 12`` with ``m`` replaced by the size
``s`` of the comparison set: the sample's extra variance is the difference
``(1/s - 1/m) / 12``.  The asymptotic normality of ``Q`` with this variance
under no change, the depth fitted on the same reference rows, is proved by Zuo
and He (2006, Annals of Statistics 34).

Ties (the halfspace depth takes the values k/m) count by mid-ranks: a
reference depth equal to ``D(Y_j)`` counts 1/2.  Ties make the true variance
smaller than the formula, so the test is then conservative, never too
liberal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DriftResult", "quality_index", "reference_depths", "twice_rank_sums"]


def reference_depths(sample_depth: np.ndarray, self_share: float = 0.0) -> np.ndarray:
    """The finite reference depths, sorted, as float64, less ``self_share``.

    ``self_share`` is what a reference row adds to its own (in-sample) depth:
    for the rank depths, whose univariate depths count the row itself on both
    sides, ``1/m`` (``m`` reference rows), so that the reference depths are
    compared with new depths on one footing (a new row at the place of a
    reference row has its depth less ``1/m``).

    Examples
    --------
    >>> reference_depths(np.array([0.3, np.nan, 0.1]))
    array([0.1, 0.3])
    >>> reference_depths(np.array([0.3, 0.1]), self_share=0.1)
    array([0. , 0.2])
    """
    values = np.asarray(sample_depth, dtype=np.float64).ravel()
    return np.sort(values[np.isfinite(values)] - self_share)


def twice_rank_sums(depth: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``[2 * sum of mid-rank counts, number of finite depths]`` of a block of new depths.

    For each finite new depth ``y``: ``#{r < y} + #{r == y} / 2`` reference
    depths ``r`` (``reference`` sorted), doubled so that the sum is an exact
    integer.  Non-finite depths (rows scored NaN under ``nan_policy='omit'``)
    are left out of both entries.

    Examples
    --------
    >>> twice_rank_sums(np.array([0.2, 0.3, np.nan]), np.array([0.1, 0.2, 0.3]))
    array([[8, 2]])
    """
    y = np.asarray(depth, dtype=np.float64).ravel()
    y = y[np.isfinite(y)]
    below = np.searchsorted(reference, y, side="left")
    at_most = np.searchsorted(reference, y, side="right")
    total = int(below.sum(dtype=np.int64) + at_most.sum(dtype=np.int64))
    return np.array([[total, y.shape[0]]], dtype=np.int64)


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


@dataclass(frozen=True)
class DriftResult:
    """The Liu-Singh drift test of a new batch against a fitted reference.

    Attributes
    ----------
    q : float
        The quality index: mean over new rows of the share of reference depths
        at most theirs (ties count 1/2).  1/2 under no change, smaller under a
        location or scale change.
    std_error : float
        Its standard error under no change, ``sqrt((s + n + 1) / (12 s n))``
        (``s`` = :attr:`n_compared`, ``n`` = :attr:`n_new`).
    p_value : float
        One-sided: the probability under no change of a ``q`` this small or
        smaller (normal approximation).
    n_reference : int
        Reference rows the model was fitted on (``n_samples_fit_``).
    n_new : int
        New rows with a finite depth.
    n_compared : int
        Reference depths compared with (at most 65,536 sampled rows; all rows
        for smaller data).
    """

    q: float
    std_error: float
    p_value: float
    n_reference: int
    n_new: int
    n_compared: int

    @property
    def z(self) -> float:
        """``(q - 1/2) / std_error``: standard normal under no change."""
        return (self.q - 0.5) / self.std_error

    def drifted(self, alpha: float = 0.05) -> bool:
        """Whether the test rejects "no change" at level ``alpha`` (``p_value < alpha``)."""
        return self.p_value < alpha

    def __repr__(self) -> str:
        return (f"DriftResult(q={self.q:.4f}, std_error={self.std_error:.4f}, "
                f"p_value={self.p_value:.3g}, n_reference={self.n_reference}, "
                f"n_new={self.n_new}, n_compared={self.n_compared})")


def quality_index(twice_sum: int, n_new: int, n_compared: int, n_reference: int) -> DriftResult:
    """The :class:`DriftResult` of summed :func:`twice_rank_sums`.

    Parameters
    ----------
    twice_sum : int
        Twice the sum over new rows of their mid-rank counts among the reference depths.
    n_new : int
        New rows counted (finite depths).
    n_compared : int
        Reference depths compared with (``s``).
    n_reference : int
        Reference rows the depth was fitted on (reported only).

    Examples
    --------
    >>> r = quality_index(2 * 50 * 100, 100, 100, 1000)
    >>> r.q, round(r.p_value, 3)
    (0.5, 0.5)
    """
    if n_new < 1 or n_compared < 1:
        raise ValueError(f"the drift test needs finite depths on both sides, got {n_new} new "
                         f"and {n_compared} reference depths; pass rows without NaN or inf")
    q = twice_sum / (2.0 * n_new * n_compared)
    se = math.sqrt((n_compared + n_new + 1) / (12.0 * n_compared * n_new))
    return DriftResult(q=q, std_error=se, p_value=_normal_cdf((q - 0.5) / se),
                       n_reference=int(n_reference), n_new=int(n_new),
                       n_compared=int(n_compared))
