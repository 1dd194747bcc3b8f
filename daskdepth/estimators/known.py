"""The registered depths' classes, by name: filled by :mod:`daskdepth.estimators.registry`.

It imports nothing, so that any estimator module may read the registered
classes (the registry itself imports the estimators).
"""

from __future__ import annotations

from typing import Any

#: Estimator class of each ``depth=`` name (also the command line's ``--depth``).
DEPTHS: dict[str, Any] = {}
#: The estimator classes by class name: the only classes a saved model may name.
ESTIMATORS: dict[str, Any] = {}
