"""daskdepth: distributed AI-IRW and IRW data depth on Dask.

>>> import numpy as np, daskdepth
>>> X = np.random.default_rng(0).normal(size=(200, 2))
>>> daskdepth.score(X, random_state=0).shape
(200,)
"""

from ._estimators import AIIRW, IRW
from ._fit import RankWarning, ToleranceWarning
from ._score import score
from ._summary import DepthSummary

__version__ = "0.1.0"

__all__ = ["AIIRW", "IRW", "DepthSummary", "RankWarning", "ToleranceWarning", "score",
           "__version__"]
