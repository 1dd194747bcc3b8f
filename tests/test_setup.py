"""Installing and first use: where compiled kernels are cached, the CI entry point.

A regular install (``pip install .``) must leave nothing inside
``site-packages/daskdepth`` when it runs, or a later ``pip install -e .`` finds
that folder there after uninstalling and Python imports it as an empty
namespace package.  Numba's ``cache=True`` writes next to the source unless told
otherwise, so the kernels are cached in a per-user directory instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import daskdepth

PACKAGE = Path(daskdepth.__file__).resolve().parent
ROOT = PACKAGE.parent

#: Prints, as JSON, every kernel's cache directory and numba's CACHE_DIR setting,
#: after compiling one kernel (so that its cache files are written).
_PROBE = """
import importlib, json, pkgutil
import numba
import daskdepth.kernels as k
paths = {}
for info in pkgutil.iter_modules(k.__path__):
    mod = importlib.import_module("daskdepth.kernels." + info.name)
    for name, obj in vars(mod).items():
        if isinstance(obj, numba.core.dispatcher.Dispatcher) and obj.__module__ == mod.__name__:
            cache = obj._cache
            paths[mod.__name__ + "." + name] = getattr(cache, "_cache_path", None)
from daskdepth.kernels.hashing import splitmix64
splitmix64(numba.uint64(1))
print(json.dumps({"paths": paths, "numba_cache_dir": numba.config.CACHE_DIR}))
"""


def _probe(tmp_path: Path, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "DASKDEPTH_CACHE_DIR", "XDG_CACHE_HOME")}
    base.update(env)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=300, env=base, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _package_cache_files() -> set[Path]:
    return {p for p in PACKAGE.rglob("*") if p.suffix in (".nbi", ".nbc")}


def test_kernels_are_cached_in_the_user_cache_directory(tmp_path):
    before = _package_cache_files()
    out = _probe(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "daskdepth" / "numba"
    assert len(out["paths"]) >= 20
    assert all(p is not None and Path(p).is_relative_to(root) for p in out["paths"].values())
    assert any(root.rglob("*splitmix64*.nbi"))  # the compiled kernel was cached there
    assert _package_cache_files() == before  # and nothing was written into the package
    assert out["numba_cache_dir"] == ""  # numba's own setting is left as it was


def test_users_numba_cache_dir_is_respected(tmp_path):
    out = _probe(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "mine"),
                 XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert all(Path(p).is_relative_to(tmp_path / "mine") for p in out["paths"].values())
    assert out["numba_cache_dir"] == str(tmp_path / "mine")
    assert not (tmp_path / "xdg").exists()


def test_daskdepth_cache_dir_overrides(tmp_path):
    out = _probe(tmp_path, DASKDEPTH_CACHE_DIR=str(tmp_path / "dd"),
                 NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert all(Path(p).is_relative_to(tmp_path / "dd" / "numba") for p in out["paths"].values())
    assert out["numba_cache_dir"] == str(tmp_path / "mine")  # still the user's for their code


def test_unwritable_cache_directory_compiles_without_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    before = _package_cache_files()
    out = _probe(tmp_path, DASKDEPTH_CACHE_DIR=str(blocker))
    assert all(p is None for p in out["paths"].values())  # compiled, not cached
    assert _package_cache_files() == before


def test_ci_runs_the_readme_sequence_in_a_fresh_environment():
    """``.ci/run`` runs the README's two commands, in order, in a new venv, and ruff."""
    readme = (ROOT / "README.md").read_text()
    commands = [line.split("#")[0].strip() for line in
                readme.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()]
    script = (ROOT / ".ci" / "run").read_text()
    lines = [line.strip() for line in script.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    positions = [lines.index(c) for c in commands]  # each README command, verbatim
    assert positions == sorted(positions)
    venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    assert venv < positions[0]
    assert any(line.startswith("ruff check daskdepth tests") for line in lines)
