"""Which estimator computes which depth: one place that builds an estimator from ``depth=``."""

from __future__ import annotations

from typing import Any

from .base import DepthDetector
from .depths import AIIRW, IRW
from .params import check_param

#: Estimator of each ``depth=`` name (also the CLI's ``--depth``).
DEPTHS: dict[str, type[DepthDetector]] = {"ai-irw": AIIRW, "irw": IRW}
#: The estimator classes by name: the only classes a saved model may name.
ESTIMATORS: dict[str, type[DepthDetector]] = {cls.__name__: cls for cls in DEPTHS.values()}


def make_estimator(depth: str = "ai-irw", **params: Any) -> DepthDetector:
    """The estimator of ``depth`` with ``params``.

    A parameter the depth does not take is an error unless it is None or that
    parameter's AI-IRW default, so ``covariance='mcd'`` with ``depth='irw'``
    is refused instead of ignored.

    Examples
    --------
    >>> make_estimator("irw", tol=1e-3, covariance="sample")
    IRW(tol=0.001)
    >>> make_estimator("irw", covariance="mcd")
    Traceback (most recent call last):
    ...
    ValueError: covariance='mcd' does not apply to depth='irw' (IRW does not whiten); leave \
it out or use depth='ai-irw'
    """
    check_param("depth", depth)
    cls = DEPTHS[depth]
    takes = set(cls._get_param_names())
    defaults = AIIRW().get_params()
    for name in sorted(set(params) - takes):
        value = params.pop(name)
        if name not in defaults:
            raise TypeError(f"unknown parameter {name!r} for depth={depth!r}; "
                            f"{cls.__name__} takes {', '.join(sorted(takes))}")
        if value is not None and not (isinstance(value, str) and value == defaults[name]):
            raise ValueError(f"{name}={value!r} does not apply to depth={depth!r} "
                             f"({cls.__name__} does not whiten); leave it out or use "
                             "depth='ai-irw'")
    return cls(**params)
