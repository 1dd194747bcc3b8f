"""The one Numba decorator of the package's compiled kernels."""

from __future__ import annotations

import numba

#: Compiled without the GIL (tasks run on threads) and cached on disk.
kernel = numba.njit(nogil=True, cache=True)
