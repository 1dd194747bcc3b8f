"""daskdepth: distributed AI-IRW, IRW, halfspace, half-space mass and projection depth on Dask.

>>> import numpy as np, daskdepth
>>> X = np.random.default_rng(0).normal(size=(200, 2))
>>> daskdepth.score(X, random_state=0).shape
(200,)
"""

# No ``from __future__ import annotations`` here: it would bind ``annotations`` in the
# package's namespace.  Helpers are imported under private names for the same reason.
import importlib as _importlib

from ._version import __version__
from .errors import (
    ClusterSettingWarning,
    CovarianceRankWarning,
    FitTooLargeError,
    FrameWarning,
    InputError,
    KernelCacheWarning,
    MissingInputError,
    ModelFormatError,
    OutputError,
    ParameterError,
    StreamBoundWarning,
    SummaryLostError,
    SummaryMemoryWarning,
    ToleranceWarning,
    ZeroCovarianceError,
)

#: Public name -> (module, attribute).  Loaded on first use (PEP 562), so that
#: ``daskdepth --version`` and ``import daskdepth.cli`` do not load Dask and NumPy's
#: compiled kernels before they are needed.
_LAZY = {
    "AIIRW": ("daskdepth.estimators", "AIIRW"),
    "IRW": ("daskdepth.estimators", "IRW"),
    "Halfspace": ("daskdepth.estimators", "Halfspace"),
    "HalfspaceMass": ("daskdepth.estimators", "HalfspaceMass"),
    "Projection": ("daskdepth.estimators", "Projection"),
    "score": ("daskdepth.estimators", "score"),
    "outliers": ("daskdepth.estimators", "outliers"),
    "outlier_auroc": ("daskdepth.estimators", "outlier_auroc"),
    "depth_interval": ("daskdepth.summary.statistics", "depth_interval"),
    "drift": ("daskdepth.estimators.drift", "drift"),
    "merge": ("daskdepth.estimators.merging", "merge"),
    "template": ("daskdepth.estimators.merging", "template"),
    "PyODAdapter": ("daskdepth.estimators.pyod", "PyODAdapter"),
    "load": ("daskdepth.io.models", "load_model"),
    "score_dataset": ("daskdepth.io.xarray", "score_dataset"),
    # Importable by name, not listed in __all__: a fitted model's summary_, not an entry point.
    "DepthSummary": ("daskdepth.summary.depth", "DepthSummary"),
}

__all__ = ["AIIRW", "IRW", "ClusterSettingWarning", "CovarianceRankWarning", "FitTooLargeError",
           "FrameWarning", "Halfspace", "HalfspaceMass", "InputError", "KernelCacheWarning",
           "MissingInputError", "ModelFormatError", "OutputError", "ParameterError",
           "Projection", "PyODAdapter", "StreamBoundWarning", "SummaryLostError",
           "SummaryMemoryWarning", "ToleranceWarning",
           "ZeroCovarianceError", "__version__", "depth_interval", "drift", "load", "merge",
           "outlier_auroc", "outliers", "score", "score_dataset", "template"]


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'daskdepth' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(_importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    # The public names only (tab completion, dir()); submodules stay importable by name.
    return sorted(__all__)
