"""The block kernels ask LLVM for 512-bit vectors (``wide_vectors``), and keep their bits.

LLVM vectorises 256 bits wide on Intel CPUs with AVX-512 unless a function
asks for more; every kernel of the block kernels' modules does
(:func:`daskdepth.kernels.tiles.wide_vectors`), since a loop is vectorised
with the attributes of the function it is inlined into.  The values do not
depend on it (elementwise loops): tests/test_kernel_tiles.py and
tests/test_kernel_chunk.py check them against a NumPy route.
"""

from __future__ import annotations

import inspect

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from oracle import kernel_projections

from daskdepth.kernels import _jit, blocks, routing, tiles

WIDE_MODULES = (tiles, routing, blocks)


def _kernels_of(module) -> list:
    return [k for k in _jit._KERNELS if k.py_func.__module__ == module.__name__]


@pytest.mark.parametrize("module", WIDE_MODULES, ids=lambda m: m.__name__.rpartition(".")[2])
def test_every_block_kernel_asks_for_wide_vectors(module):
    kernels = _kernels_of(module)
    assert kernels, f"no kernels found in {module.__name__}"
    missing = [k.py_func.__name__ for k in kernels
               if "wide_vectors()" not in inspect.getsource(k.py_func)]
    assert not missing, f"kernels compiled at 256-bit vectors: {missing}"


def test_projection_is_compiled_with_the_attribute_and_keeps_its_bits():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1_100, 10))
    v = rng.standard_normal((6, 10))
    p = tiles.project(x, v)
    assert np.array_equal(p, kernel_projections(x, v, np.ones(x.shape[0], dtype=bool)))
    # Compiled afresh here: Numba cannot inspect a kernel loaded from the on-disk cache,
    # which is where the package's own comes from once any process has compiled it.
    fn = numba.njit(tiles.project_columns.py_func)
    out = np.empty((v.shape[0], x.shape[0]))
    fn(np.ascontiguousarray(x.T), v, out)
    assert np.array_equal(out, p)
    ir = fn.inspect_llvm(fn.signatures[0])
    assert '"prefer-vector-width"="512"' in ir
    if "+avx512f" in llvm.get_host_cpu_features().flatten().split(","):
        assert "zmm" in fn.inspect_asm(fn.signatures[0])
