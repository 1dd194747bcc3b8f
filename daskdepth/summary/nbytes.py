"""Sizes of the records that tasks pass around, for dask's ``sizeof``.

Dask measures what a worker holds with ``dask.sizeof.sizeof``, which falls
back to ``sys.getsizeof`` for classes it does not know: a record of large
arrays would count as a few dozen bytes.  The worker's memory manager would
then see its arrays as unmanaged memory (and spill other keys, or pause,
instead of these), and the scheduler would place tasks as if they were free
to move.  The records derive from :class:`ArrayRecord`, whose ``__sizeof__`` is
:func:`fields_nbytes`.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np


def fields_nbytes(record: Any) -> int:
    """Bytes of a dataclass record: its object header and the arrays of its fields.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Pair:
    ...     a: np.ndarray
    ...     b: int
    >>> fields_nbytes(Pair(np.zeros(1000), 3)) >= 8000
    True
    """
    total = object.__sizeof__(record)
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        total += value.nbytes if isinstance(value, np.ndarray) else sys.getsizeof(value)
    return total


class ArrayRecord:
    """Base of the dataclass records of arrays that tasks pass around: dask's ``sizeof``
    counts their arrays (:func:`fields_nbytes`), so workers see them as managed memory.
    """

    __slots__ = ()

    def __sizeof__(self) -> int:
        return fields_nbytes(self)


def describe_bytes(nbytes: float) -> str:
    """``1.5 MiB``: a byte count for a summary's one-line description.

    Examples
    --------
    >>> describe_bytes(40), describe_bytes(3 * 2**20)
    ('40 bytes', '3.0 MiB')
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{int(nbytes)} bytes"
