"""daskdepth: distributed AI-IRW and IRW data depth on Dask.

>>> import numpy as np, daskdepth
>>> X = np.random.default_rng(0).normal(size=(200, 2))
>>> daskdepth.score(X, random_state=0).shape
(200,)
"""

from ._estimators import AIIRW, IRW
from ._fit import RankWarning, ToleranceWarning
from ._persistence import load_model as load
from ._score import score
from ._summary import DepthSummary
from ._xarray import score_dataset

__version__ = "0.1.0"

__all__ = ["AIIRW", "IRW", "DepthSummary", "RankWarning", "ToleranceWarning", "load", "score",
           "score_dataset", "__version__"]
