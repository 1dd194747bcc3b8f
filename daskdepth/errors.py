"""Warnings and exceptions of daskdepth, and the wording of messages shared by several layers.

This module imports nothing from the package, so every layer can raise these.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: How many offending row indices an error message lists.
MAX_BAD_ROWS = 5

#: This package's folder: its frames are not the user's code.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _in_library(filename: str) -> bool:
    """This package's code, or scikit-learn's (whose ``_fit_context`` wraps ``fit``)."""
    return filename.startswith(_PACKAGE_DIR) or f"{os.sep}sklearn{os.sep}" in filename


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the first caller outside the library.

    For ``warnings.warn(..., stacklevel=user_stacklevel())`` called in the
    function that warns, whatever path of calls led there (an estimator's
    ``fit``, the command line).
    """
    frame, level = sys._getframe(1), 1  # the function that warns
    while frame is not None and _in_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


class CovarianceRankWarning(UserWarning):
    """The covariance is singular; AI-IRW depth is computed in its principal subspace."""


class FrameWarning(UserWarning):
    """``frame='invariant'``: the data do not fix the invariant frame completely (symmetries)."""


class ToleranceWarning(UserWarning):
    """The certified error bound could not be brought below ``tol``."""


class StreamBoundWarning(UserWarning):
    """``partial_fit``: the certified error bound grew past its budget (the new rows fall in
    few leaves, as under drift); ``fit`` on recent data brings it back to ``tol``."""


class SummaryMemoryWarning(UserWarning):
    """The fitted depth summary takes a large share of a worker's memory."""


class KernelCacheWarning(UserWarning):
    """The compiled-kernel cache is not used (an unsafe or unusable folder) or had a bad entry."""


class ClusterSettingWarning(UserWarning):
    """A setting of the cluster's workers can stop a job for good (see the message for the fix)."""


class SummaryLostError(RuntimeError):
    """What a model or a fit kept in a Dask cluster's memory is gone.

    A model fitted on a cluster keeps its summary on the workers: a
    ``client.restart()``, or a closed client, drops it (a lost worker does
    not: its part is computed again).  The message says how to keep a model
    across a restart (``model.save`` before, :func:`daskdepth.load` after) or
    to fit again.
    """


class FitTooLargeError(ValueError):
    """The fit's plan needs more memory than the workers or this machine have (refused up front)."""


class ZeroCovarianceError(ValueError):
    """The covariance of the reference rows is zero: every feature is constant (as stored)."""


class ParameterError(ValueError, TypeError):
    """A parameter the chosen depth does not take, or does not take with the others given.

    ``name`` and ``value`` are the parameter, ``depth`` the depth's name, ``why``
    the reason and ``takers`` the depths that take it, so that the command line
    can say the same with its option names.  A :class:`ValueError`, and a
    :class:`TypeError` as Python's own refusal of an unexpected keyword argument
    (and scikit-learn's ``InvalidParameterError``) is.
    """

    def __init__(self, message: str, *, name: str = "", value: object = None, depth: str = "",
                 why: str = "", takers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.name, self.value, self.depth, self.why, self.takers = (name, value, depth, why,
                                                                    takers)


class InputError(ValueError):
    """The input store is missing, unreadable, or does not hold a usable 2-D array."""


class MissingInputError(InputError, FileNotFoundError):
    """An input the caller named (a store to read, a saved model) does not exist.

    A usage error of the command line (exit status 2, as a bad option), and a
    :class:`FileNotFoundError` as Python's own ``open`` would raise.
    """


class OutputError(ValueError):
    """The output path cannot be written under the safety rules."""


class ModelFormatError(ValueError):
    """A store is not a daskdepth model, is corrupted, or needs a newer daskdepth."""


def describe_rows(rows: Sequence[int], total: int) -> str:
    """``[17, 18, ...]``: the first :data:`MAX_BAD_ROWS` of ``total`` row indices.

    Examples
    --------
    >>> describe_rows([3, 9], 2), describe_rows(range(10), 10)
    ('[3, 9]', '[0, 1, 2, 3, 4, ...]')
    """
    shown = ", ".join(str(int(i)) for i in list(rows)[:MAX_BAD_ROWS])
    more = ", ..." if total > MAX_BAD_ROWS else ""
    return f"[{shown}{more}]"


def nan_rows_message(count: int, first_rows: Sequence[int], what: str = "input",
                     fix: str = "pass nan_policy='omit'") -> str:
    """The one wording of "rows with NaN or inf", with the fix.

    Examples
    --------
    >>> nan_rows_message(2, [17, 40])
    "input has 2 rows with NaN or inf values (rows [17, 40]); drop them or pass nan_policy='omit'"
    """
    noun = "row" if count == 1 else "rows"
    return (f"{what} has {count} {noun} with NaN or inf values (rows "
            f"{describe_rows(first_rows, count)}); drop them or {fix}")


#: The covariance (or the rows' factor) of the reference data overflows float64.
OVERFLOW_MESSAGE = (
    "the covariance of the reference data overflows float64: the values are too large in scale "
    "(squares above 1e308); rescale the features, e.g. divide them by a common factor"
)


def rounding_rank_message(location: float, spread: float) -> str:
    """The one wording of "the data vary only within the rounding of their values" (rank 0).

    ``location`` and ``spread`` are the centre and standard deviation of the
    feature that varies least relative to its magnitude.

    Examples
    --------
    >>> print(rounding_rank_message(1e12, 3e-4))  # doctest: +NORMALIZE_WHITESPACE
    the reference data vary only within the float64 rounding of their values (a feature
    centred at 1e+12 has standard deviation 0.0003): no direction has more variance than
    rounding explains, so there is none along which to rank points; subtract a common
    offset before converting to float64 (e.g. X - X.min(axis=0), in integer arithmetic for
    integer IDs), or drop identifier-like columns
    """
    return (
        "the reference data vary only within the float64 rounding of their values (a "
        f"feature centred at {location:.3g} has standard deviation {spread:.3g}): no direction "
        "has more variance than rounding explains, so there is none along which to rank "
        "points; subtract a common offset before converting to float64 (e.g. "
        "X - X.min(axis=0), in integer arithmetic for integer IDs), or drop identifier-like "
        "columns"
    )
