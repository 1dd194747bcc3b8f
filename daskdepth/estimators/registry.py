"""Which estimator computes which depth, derived from the estimator classes.

Each class names its depth (``depth_name``), owns its parameters and their
rules, declares what it can do (``capabilities``, checked here against the
class) and the dataclasses its saved summary holds (``summary_types``);
:data:`DEPTHS` (``depth=``, the command line's ``--depth``) and
:data:`ESTIMATORS` (the classes a saved model may name) list the registered
classes, registration adds their summary types to the classes a model store
may hold (:data:`daskdepth.storage.codec.MODEL_CLASSES`), and
:func:`make_estimator` builds one from ``depth=`` and parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Real
from typing import Any

from sklearn.utils._param_validation import StrOptions

from ..errors import ParameterError
from ..storage.codec import MODEL_CLASSES, class_name
from .base import Capabilities, DepthDetector
from .depths import AIIRW, IRW, Halfspace
from .explain import EXPLAINED
from .known import DEPTHS, ESTIMATORS
from .mass import HalfspaceMass
from .params import check_param
from .projection import Projection

#: The classes the storage layer allows by itself (the direction blocks), kept when the depths
#: that declare them are unregistered.
_STORAGE_CLASSES = dict(MODEL_CLASSES)


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
    check_capabilities(cls)
    for kind in cls.summary_types:
        other = MODEL_CLASSES.get(class_name(kind), kind)
        if other is not kind:
            raise ValueError(f"{cls.__name__}'s summary type {class_name(kind)!r} is already "
                             f"another class's name ({other!r}); rename it")
    DEPTHS[name] = cls
    ESTIMATORS[cls.__name__] = cls
    for kind in cls.summary_types:
        MODEL_CLASSES[class_name(kind)] = kind
    return cls


def unregister(cls: type[DepthDetector]) -> None:
    """Undo :func:`register` of ``cls`` (its summary types too, where no other depth has them)."""
    if DEPTHS.get(str(cls.depth_name)) is cls:
        del DEPTHS[str(cls.depth_name)]
    if ESTIMATORS.get(cls.__name__) is cls:
        del ESTIMATORS[cls.__name__]
    kept = {kind for other in ESTIMATORS.values() for kind in other.summary_types}
    kept.update(_STORAGE_CLASSES.values())
    for kind in cls.summary_types:
        if kind not in kept and MODEL_CLASSES.get(class_name(kind)) is kind:
            del MODEL_CLASSES[class_name(kind)]


def check_capabilities(cls: type[DepthDetector]) -> None:
    """Refuse a class whose declared ``capabilities`` or ``summary_types`` disagree with it.

    A ``ValueError`` names the declaration to change: ``directions`` and ``tol``
    are the parameters ``n_directions`` and ``tol``, ``covariance`` the fitted
    ``covariance_``, ``explains`` a summary of per-direction depths, ``std`` a
    statistic with standard errors; ``summary_types`` starts with ``summary_type``.

    Examples
    --------
    >>> class Loose(IRW):
    ...     depth_name = "loose"
    ...     capabilities = Capabilities(directions=True, covariance=True, explains=True,
    ...                                 std=True)  # tol left out
    >>> check_capabilities(Loose)
    Traceback (most recent call last):
    ...
    ValueError: Loose declares capabilities.tol=False, but it has a parameter 'tol'; declare \
capabilities = Capabilities(..., tol=True) or change the class
    """
    declared = cls.capabilities
    if not isinstance(declared, Capabilities):
        raise ValueError(f"{cls.__name__}.capabilities is a {type(declared).__name__}, not a "
                         "daskdepth.estimators.base.Capabilities")
    params = set(cls._get_param_names())
    has = {
        "directions": ("n_directions" in params, "parameter 'n_directions'"),
        "tol": ("tol" in params, "parameter 'tol'"),
        "covariance": ("covariance_" in cls._fitted_attributes,
                       "fitted attribute 'covariance_' (_fitted_attributes)"),
        "explains": (issubclass(cls.summary_type, EXPLAINED),
                     f"summary of per-direction depths ({cls.summary_type.__name__})"),
        "std": (bool(cls._statistic.has_std),
                f"statistic with standard errors ({cls._statistic.name!r})"),
        "partial_fit": (cls.partial_fit is not DepthDetector.partial_fit,
                        "partial_fit of its own (DepthDetector.partial_fit refuses)"),
    }
    for field, (actual, what) in has.items():
        if getattr(declared, field) != actual:
            raise ValueError(f"{cls.__name__} declares capabilities.{field}={not actual}, but "
                             f"it has {'a' if actual else 'no'} {what}; declare capabilities = "
                             f"Capabilities(..., {field}={actual}) or change the class")
    if not cls.summary_types or cls.summary_types[0] is not cls.summary_type:
        raise ValueError(f"{cls.__name__}.summary_types must start with its summary_type "
                         f"({cls.summary_type.__name__}): the dataclasses its saved summary "
                         "holds")


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
