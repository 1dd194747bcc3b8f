"""A kernel's cached code goes stale when a kernel it calls, in another module, changes.

Numba stamps a cache entry with its own module's size and modification time
only, while the kernels a kernel calls are compiled into it: without the
package's stamp of every kernel module, a process would load the caller's old
code after the callee's module changed (the block kernels call the routing
search of another module, ``ranks`` and ``top`` call ``routing``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import daskdepth

CALLEE = "from ._jit import kernel\n\n\n@kernel\ndef f(x):\n    return x + {k}\n"
CALLER = ("from ._jit import kernel\nfrom ._t_callee import f\n\n\n@kernel\n"
          "def g(x):\n    return f(x) * 2\n")
RUN = ("from daskdepth.kernels._t_caller import g\n"
       "from daskdepth.kernels._jit import compiled_here\n"
       "print(g(1), compiled_here()['_t_caller.g'])\n")


def _run(tree: Path, cache: Path) -> tuple[int, int]:
    """``g(1)`` and how many signatures of ``g`` this process compiled."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DASKDEPTH_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env,
                          cwd=tree, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    value, compiled = proc.stdout.split()
    return int(value), int(compiled)


def test_a_change_to_a_called_kernel_in_another_module_recompiles_the_caller(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(Path(daskdepth.__file__).parent, tree / "daskdepth",
                    ignore=shutil.ignore_patterns("__pycache__"))
    kernels = tree / "daskdepth" / "kernels"
    (kernels / "_t_caller.py").write_text(CALLER)
    (kernels / "_t_callee.py").write_text(CALLEE.format(k=1))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)

    assert _run(tree, cache) == (4, 1)  # compiled, then saved
    assert _run(tree, cache) == (4, 0)  # loaded from the cache
    (kernels / "_t_callee.py").write_text(CALLEE.format(k=20))  # another size, another time
    assert _run(tree, cache) == (42, 1)  # the caller compiled again with the new callee
    assert _run(tree, cache) == (42, 0)
