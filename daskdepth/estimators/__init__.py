"""Layer 8: scikit-learn style estimators, the one-call :func:`score`, parameters and inputs."""

from .base import DepthDetector
from .depths import AIIRW, IRW, Halfspace
from .evaluation import outlier_auroc
from .mass import HalfspaceMass
from .params import check_param
from .projection import Projection
from .registry import DEPTHS, ESTIMATORS, make_estimator, register, registered, unregister
from .score import outliers, score

__all__ = ["AIIRW", "DEPTHS", "ESTIMATORS", "IRW", "DepthDetector", "Halfspace",
           "HalfspaceMass", "Projection", "check_param", "make_estimator", "outlier_auroc",
           "outliers", "register", "registered", "score", "unregister"]
