"""Which estimator computes which depth: one place that builds an estimator from ``depth=``."""

from __future__ import annotations

from numbers import Real
from typing import Any

from .base import DepthDetector
from .depths import AIIRW, IRW, Halfspace
from .mass import HalfspaceMass
from .params import DEPTH_NAMES, check_param

#: Estimator of each ``depth=`` name (also the CLI's ``--depth``).
DEPTHS: dict[str, type[DepthDetector]] = {"ai-irw": AIIRW, "irw": IRW, "halfspace": Halfspace,
                                          "halfspace-mass": HalfspaceMass}
#: The estimator classes by name: the only classes a saved model may name.
ESTIMATORS: dict[str, type[DepthDetector]] = {cls.__name__: cls for cls in DEPTHS.values()}

if tuple(DEPTHS) != DEPTH_NAMES:  # pragma: no cover - both lists are edited together
    raise RuntimeError("estimators.params.DEPTH_NAMES must list the names of DEPTHS")

#: Why a depth does not take a parameter some other depth takes (the default reason:
#: the estimator has no such parameter).
WHY_NOT = {
    ("irw", "covariance"): "IRW does not whiten",
    ("irw", "support_fraction"): "IRW does not whiten",
    ("halfspace-mass", "covariance"): "the half-space mass does not whiten",
    ("halfspace-mass", "support_fraction"): "the half-space mass does not whiten",
    ("halfspace-mass", "tol"): "the half-space mass is exact for its half-spaces",
}


def _defaults() -> dict[str, Any]:
    """Every parameter some depth takes, with its default (the first depth's that takes it)."""
    out: dict[str, Any] = {}
    for cls in DEPTHS.values():
        for name, value in cls().get_params().items():
            out.setdefault(name, value)
    return out


def _is_default(value: Any, default: Any) -> bool:
    """``value`` is None or a plain scalar equal to ``default`` (arrays never are)."""
    if value is None:
        return True
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, str) and isinstance(default, str):
        return value == default
    if isinstance(value, Real) and isinstance(default, Real):
        return value == default
    return False


def make_estimator(depth: str = "ai-irw", **params: Any) -> DepthDetector:
    """The estimator of ``depth`` with ``params``.

    A parameter the depth does not take is an error unless it is None or the
    default of the depths that take it, so ``covariance='mcd'`` with
    ``depth='irw'`` is refused instead of ignored (and the one-call functions
    can pass their defaults to every depth).

    Examples
    --------
    >>> make_estimator("irw", tol=1e-3, covariance="sample")
    IRW(tol=0.001)
    >>> make_estimator("halfspace-mass", tol=1e-4, subsample_size=64)
    HalfspaceMass(subsample_size=64)
    >>> make_estimator("irw", covariance="mcd")
    Traceback (most recent call last):
    ...
    ValueError: covariance='mcd' does not apply to depth='irw' (IRW does not whiten); leave \
it out or use depth='ai-irw' or depth='halfspace'
    """
    check_param("depth", depth)
    cls = DEPTHS[depth]
    takes = set(cls._get_param_names())
    defaults = _defaults()
    for name in sorted(set(params) - takes):
        value = params.pop(name)
        if name not in defaults:
            raise TypeError(f"unknown parameter {name!r} for depth={depth!r}; "
                            f"{cls.__name__} takes {', '.join(sorted(takes))}")
        if not _is_default(value, defaults[name]):
            why = WHY_NOT.get((depth, name), f"{cls.__name__} has no parameter {name!r}")
            takers = " or ".join(f"depth={other!r}" for other, c in DEPTHS.items()
                                 if name in c._get_param_names())
            raise ValueError(f"{name}={value!r} does not apply to depth={depth!r} ({why}); "
                             f"leave it out or use {takers}")
    model = cls(**params)
    # Options the depth takes but not together (halfspace: covariance= only with
    # affine_invariant=True), refused here too so that no caller starts any work first.
    model._covariance_spec()
    return model
