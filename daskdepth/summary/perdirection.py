"""What the summaries of one value pair per direction share (NumPy only).

:class:`~daskdepth.summary.mass.MassSummary` and
:class:`~daskdepth.summary.projection.ProjectionSummary` each hold a centring
``location`` (d,), ``directions`` (m, d), two float64 arrays of one value per
direction and the number of reference rows ``n``; their size, one-line
description and shape checks are written once here.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .leaves import _check_array, _check_int
from .nbytes import describe_bytes


class PerDirection:
    """Base of the dataclass summaries of ``location``, ``directions``, two arrays
    of one value per direction (named by :attr:`per_direction`) and ``n``.

    Subclasses are declared ``@dataclass(repr=False)`` so that this class's
    one-line ``__repr__`` is theirs.
    """

    location: np.ndarray
    directions: np.ndarray
    n: int
    #: The fields holding one float64 value per direction.
    per_direction: ClassVar[tuple[str, str]]
    #: What one direction is called in the one-line description.
    noun: ClassVar[str]

    @property
    def nbytes(self) -> int:
        """Bytes of the directions and the per-direction arrays."""
        first, second = (getattr(self, name) for name in self.per_direction)
        return self.directions.nbytes + first.nbytes + second.nbytes

    def __repr__(self) -> str:
        """One line (the dataclass's repr printed every array)."""
        m, d = (int(v) for v in self.directions.shape)
        return (f"<{type(self).__name__}: n={self.n:,} rows, d={d}, {m:,} {self.noun}"
                f"{'s' * (m != 1)}, {describe_bytes(self.nbytes)}>")

    def _check_shapes(self) -> None:
        """Refuse a wrong ``n``, or arrays of another type, dtype or shape than
        :class:`PerDirection` describes (values are not looked at).

        Raises
        ------
        ValueError
            Naming the first field that is wrong.
        """
        _check_int(self.n, "n", 1)
        if not isinstance(self.directions, np.ndarray) or self.directions.ndim != 2:
            raise ValueError("directions is not a 2-D array")
        m, d = self.directions.shape
        _check_array(self.location, "location", (np.float64,), (d,))
        _check_array(self.directions, "directions", (np.float64,), (max(m, 1), max(d, 1)))
        for name in self.per_direction:
            _check_array(getattr(self, name), name, (np.float64,), (m,))
