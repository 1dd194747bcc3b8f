"""Which estimator computes which depth, derived from the estimator classes.

Each class names its depth (``depth_name``) and owns its parameters and their
rules; :data:`DEPTHS` (``depth=``, the command line's ``--depth``) and
:data:`ESTIMATORS` (the classes a saved model may name) list the registered
classes, and :func:`make_estimator` builds one from ``depth=`` and parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Real
from typing import Any

from sklearn.utils._param_validation import StrOptions

from ..errors import ParameterError
from .base import DepthDetector
from .depths import AIIRW, IRW, Halfspace
from .known import DEPTHS, ESTIMATORS
from .mass import HalfspaceMass
from .params import check_param
from .projection import Projection


def register(cls: type[DepthDetector]) -> type[DepthDetector]:
    """Make ``cls`` the estimator of ``depth=cls.depth_name`` (usable as a class decorator).

    Examples
    --------
    >>> class Wide(IRW):
    ...     depth_name = "wide-irw"
    >>> with registered(Wide):
    ...     make_estimator("wide-irw", n_directions=10)
    Wide(n_directions=10)
    >>> "wide-irw" in DEPTHS
    False
    """
    name = cls.depth_name
    if not (isinstance(name, str) and name):
        raise ValueError(f"{cls.__name__} has no depth_name; set it to the name depth= takes")
    for table, key in ((DEPTHS, name), (ESTIMATORS, cls.__name__)):
        if table.get(key, cls) is not cls:
            raise ValueError(f"{key!r} is already the name of {table[key].__name__}; choose "
                             "another name")
    DEPTHS[name] = cls
    ESTIMATORS[cls.__name__] = cls
    return cls


def unregister(cls: type[DepthDetector]) -> None:
    """Undo :func:`register` of ``cls``."""
    if DEPTHS.get(str(cls.depth_name)) is cls:
        del DEPTHS[str(cls.depth_name)]
    if ESTIMATORS.get(cls.__name__) is cls:
        del ESTIMATORS[cls.__name__]


@contextmanager
def registered(cls: type[DepthDetector]) -> Iterator[type[DepthDetector]]:
    """``cls`` registered for the duration of the ``with`` block (tests, experiments)."""
    register(cls)
    try:
        yield cls
    finally:
        unregister(cls)


for _cls in (AIIRW, IRW, Halfspace, HalfspaceMass, Projection):
    register(_cls)


def check_depth(depth: Any, caller: str = "daskdepth") -> type[DepthDetector]:
    """The estimator class of ``depth``; an ``InvalidParameterError`` naming the choices."""
    check_param("depth", depth, caller, [StrOptions(set(DEPTHS))],
                hint="depth must be one of " + ", ".join(repr(name) for name in DEPTHS))
    return DEPTHS[depth]


def takers(name: str) -> tuple[str, ...]:
    """The depths that take the parameter ``name``."""
    return tuple(depth for depth, cls in DEPTHS.items() if name in cls._get_param_names())


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
    ``depth='irw'`` is refused (a :class:`~daskdepth.errors.ParameterError`)
    instead of ignored.  The rules between the depth's own parameters
    (``DepthDetector._check_rules``) are checked too, before any work.

    Examples
    --------
    >>> make_estimator("irw", tol=1e-3, covariance="sample")
    IRW(tol=0.001)
    >>> make_estimator("halfspace-mass", tol=1e-4, subsample_size=64)
    HalfspaceMass(subsample_size=64)
    >>> make_estimator("irw", covariance="mcd")
    Traceback (most recent call last):
    ...
    daskdepth.errors.ParameterError: covariance='mcd' does not apply to depth='irw' (IRW does \
not whiten); leave it out or use depth='ai-irw' or depth='halfspace' or depth='projection'
    """
    cls = check_depth(depth)
    takes = set(cls._get_param_names())
    defaults = _defaults()
    for name in sorted(set(params) - takes):
        value = params.pop(name)
        if name not in defaults:
            raise TypeError(f"unknown parameter {name!r} for depth={depth!r}; "
                            f"{cls.__name__} takes {', '.join(sorted(takes))}")
        if not _is_default(value, defaults[name]):
            why = cls._why_not.get(name, f"{cls.__name__} has no parameter {name!r}")
            others = takers(name)
            alternatives = " or ".join(f"depth={other!r}" for other in others)
            raise ParameterError(f"{name}={value!r} does not apply to depth={depth!r} ({why}); "
                                 f"leave it out or use {alternatives}", name=name, value=value,
                                 depth=depth, why=why, takers=others)
    model = cls(**params)
    # Options the depth takes but not together (support_fraction only with covariance='mcd',
    # ...), refused here too so that no caller starts any work first.
    model._check_rules()
    return model
