"""daskdepth: distributed AI-IRW, IRW, halfspace and half-space mass data depth on Dask.

>>> import numpy as np, daskdepth
>>> X = np.random.default_rng(0).normal(size=(200, 2))
>>> daskdepth.score(X, random_state=0).shape
(200,)
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__
from .errors import (
    CovarianceRankWarning,
    FitTooLargeError,
    FrameWarning,
    SummaryMemoryWarning,
    ToleranceWarning,
)

#: Public name -> (module, attribute).  Loaded on first use (PEP 562), so that
#: ``daskdepth --version`` and ``import daskdepth.cli`` do not load Dask and NumPy's
#: compiled kernels before they are needed.
_LAZY = {
    "AIIRW": ("daskdepth.estimators", "AIIRW"),
    "IRW": ("daskdepth.estimators", "IRW"),
    "Halfspace": ("daskdepth.estimators", "Halfspace"),
    "HalfspaceMass": ("daskdepth.estimators", "HalfspaceMass"),
    "score": ("daskdepth.estimators", "score"),
    "load": ("daskdepth.io.models", "load_model"),
    "score_dataset": ("daskdepth.io.xarray", "score_dataset"),
    "DepthSummary": ("daskdepth.summary.depth", "DepthSummary"),
}

__all__ = ["AIIRW", "IRW", "CovarianceRankWarning", "DepthSummary", "FitTooLargeError",
           "FrameWarning", "Halfspace", "HalfspaceMass",
           "SummaryMemoryWarning", "ToleranceWarning", "__version__", "load", "score",
           "score_dataset"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'daskdepth' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
