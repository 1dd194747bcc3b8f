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
from typing import NamedTuple

import pytest

import daskdepth


class Copy(NamedTuple):
    """A copy of the package (``tree``) and a private kernel cache for it (``cache``)."""

    tree: Path
    cache: Path

    @property
    def kernels(self) -> Path:
        """The copy's kernel modules, where a test writes its own."""
        return self.tree / "daskdepth" / "kernels"


@pytest.fixture
def copied(tmp_path: Path) -> Copy:
    """The installed package copied into ``tmp_path`` (no ``__pycache__``), an empty cache."""
    tree = tmp_path / "tree"
    shutil.copytree(Path(daskdepth.__file__).parent, tree / "daskdepth",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    return Copy(tree, cache)


def _run(tree: Path, cache: Path, script: str) -> tuple[str, str]:
    """``script`` run in a new process on the package in ``tree``: its stdout (stripped), stderr."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DASKDEPTH_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tree, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc.stderr


CALLEE = "from ._jit import kernel\n\n\n@kernel\ndef f(x):\n    return x + {k}\n"
CALLER = ("from ._jit import kernel\nfrom ._t_callee import f\n\n\n@kernel\n"
          "def g(x):\n    return f(x) * 2\n")
RUN = ("from daskdepth.kernels._t_caller import g\n"
       "from daskdepth.kernels._jit import compiled_here\n"
       "print(g(1), compiled_here()['_t_caller.g'])\n")


def test_a_change_to_a_called_kernel_in_another_module_recompiles_the_caller(copied):
    tree, cache, kernels = copied.tree, copied.cache, copied.kernels
    (kernels / "_t_caller.py").write_text(CALLER)
    (kernels / "_t_callee.py").write_text(CALLEE.format(k=1))

    # g(1), then how many signatures of g the process compiled
    assert _run(tree, cache, RUN)[0] == "4 1"  # compiled, then saved
    assert _run(tree, cache, RUN)[0] == "4 0"  # loaded from the cache
    (kernels / "_t_callee.py").write_text(CALLEE.format(k=20))  # another size and time
    assert _run(tree, cache, RUN)[0] == "42 1"  # the caller compiled again with the new callee
    assert _run(tree, cache, RUN)[0] == "42 0"


RECORD = ("from typing import NamedTuple\n\n\nclass Rec(NamedTuple):\n    a: float\n"
          "    b: float\n")
USER = ("from ._jit import kernel\nfrom .{where} import Rec  # noqa: F401\n\n\n@kernel\n"
        "def h(r):\n    return r.a + r.b\n")
# h's value, how many signatures of h the process compiled, the entries it dropped; the
# package's DEBUG records to stderr (only the package's: Numba's stay at WARNING)
RUN_RECORD = ("import logging\nimport warnings\nwarnings.simplefilter('always')\n"
              "logging.basicConfig(level=logging.WARNING)\n"
              "logging.getLogger('daskdepth').setLevel(logging.DEBUG)\n"
              "from daskdepth.kernels._t_user import h, Rec\n"
              "from daskdepth.kernels._jit import compiled_here, dropped_cache_entries\n"
              "print(h(Rec(1.0, 2.0)), compiled_here()['_t_user.h'], dropped_cache_entries())\n")


@pytest.mark.parametrize(("old_module", "error"), [
    (None, "ModuleNotFoundError: No module named 'daskdepth.kernels._t_old'"),
    ("", "AttributeError: Can't get attribute 'Rec' on <module 'daskdepth.kernels._t_old'"),
], ids=["module-gone", "record-gone"])
def test_an_entry_naming_a_record_that_moved_is_recompiled_without_a_warning(copied, old_module,
                                                                             error):
    # A kernel record moved to another module (as routing.Projection to tiles): the
    # cache entry written before names a type this version does not have; it is
    # stale, not damaged, so it is compiled again without a KernelCacheWarning, but
    # logged (DEBUG) and counted, in case such entries were dropped in every process.
    tree, cache, kernels = copied.tree, copied.cache, copied.kernels
    (kernels / "_t_old.py").write_text(RECORD)
    (kernels / "_t_user.py").write_text(USER.format(where="_t_old"))

    out, err = _run(tree, cache, RUN_RECORD)
    assert out == "3.0 1 {}"
    assert "DEBUG:daskdepth" not in err
    (kernels / "_t_old.py").unlink()
    if old_module is not None:  # the module stays, without the record
        (kernels / "_t_old.py").write_text(old_module)
    (kernels / "_t_new.py").write_text(RECORD)
    (kernels / "_t_user.py").write_text(USER.format(where="_t_new"))
    out, err = _run(tree, cache, RUN_RECORD)
    assert out == "3.0 1 {'_t_user.h': 1}"
    assert "KernelCacheWarning" not in err
    debug = [line for line in err.splitlines() if line.startswith("DEBUG:daskdepth")]
    assert len(debug) == 1, err
    assert debug[0].startswith("DEBUG:daskdepth.kernels._jit:daskdepth kernel _t_user.h: ")
    assert f"failed to load ({error}" in debug[0]
    assert _run(tree, cache, RUN_RECORD)[0] == "3.0 0 {}"  # the fresh entry is used
