"""Installing and first use: where compiled kernels are cached, the CI entry point.

A regular install (``pip install .``) must leave nothing inside
``site-packages/daskdepth`` when it runs, or a later ``pip install -e .`` finds
that folder there after uninstalling and Python imports it as an empty
namespace package.  Numba's ``cache=True`` writes next to the source unless told
otherwise, so the kernels are cached in a per-user directory instead.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import daskdepth
from daskdepth.errors import KernelCacheWarning
from daskdepth.kernels import _jit

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


# ------------------------------------------------------------------ the kernel cache's safety
# Numba's cache index files are pickles: whoever can write the cache folder runs code in
# every process that loads a kernel.  A folder others can write, or replace, is refused.

#: A pickle that creates the file it names when it is loaded (what a planted index could do).
_PLANT = """
import pickle, sys
class Plant:
    def __reduce__(self):
        return (open, (sys.argv[2], "w"))
with open(sys.argv[1], "wb") as f:
    pickle.dump(Plant(), f)
"""


def _choice(monkeypatch, folder) -> _jit.CacheChoice:
    """The cache folder chosen for ``DASKDEPTH_CACHE_DIR=folder`` (not this process's choice)."""
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(folder))
    return _jit.cache_choice.__wrapped__()


def _kernel_index(cache_root: Path) -> Path:
    """Where the probe's kernel (splitmix64) has its index under ``cache_root``."""
    (index,) = cache_root.rglob("*splitmix64*.nbi")
    return index


def test_world_writable_cache_folder_is_refused_and_its_files_never_loaded(tmp_path):
    # Learn where the probe's kernel keeps its index, then plant one in a folder mode 1777.
    _probe(tmp_path, DASKDEPTH_CACHE_DIR=str(tmp_path / "private"))
    relative = _kernel_index(tmp_path / "private").relative_to(tmp_path / "private")
    shared = tmp_path / "shared"
    (shared / relative).parent.mkdir(parents=True)
    shared.chmod(0o1777)
    marker = tmp_path / "code-ran"
    subprocess.run([sys.executable, "-c", _PLANT, str(shared / relative), str(marker)],
                   check=True)
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=300, env={**base, "DASKDEPTH_CACHE_DIR": str(shared)},
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(p is None for p in out["paths"].values())  # compiled, not cached
    assert not marker.exists()  # the planted index was never unpickled
    assert "KernelCacheWarning" in proc.stderr and str(shared) in proc.stderr
    assert "writable by other users (mode 1777)" in proc.stderr


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_cache_folder_writable_by_group_or_others_is_refused(tmp_path, monkeypatch, mode):
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.warns(KernelCacheWarning, match=f"{folder} is writable by other users"):
        choice = _choice(monkeypatch, folder)
    assert choice.folder is None
    assert not (folder / "numba").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a folder to another user needs root")
def test_cache_folder_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 4242, -1)
    with pytest.warns(KernelCacheWarning, match="owned by user id 4242, not by you"):
        assert _choice(monkeypatch, folder).folder is None
    # and a numba folder inside a private one, made by someone else
    mine = tmp_path / "mine"
    (mine / "numba").mkdir(parents=True, mode=0o700)
    os.chown(mine / "numba", 4242, -1)
    with pytest.warns(KernelCacheWarning, match="owned by user id 4242"):
        assert _choice(monkeypatch, mine).folder is None


def test_parent_writable_without_sticky_bit_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # anyone may rename our folder away and put theirs in its place
    with pytest.warns(KernelCacheWarning, match="without the sticky bit"):
        choice = _choice(monkeypatch, parent / "cache")
    assert choice.folder is None
    assert not (parent / "cache").exists()  # nothing created there


def test_missing_folders_are_created_private_under_a_sticky_parent(tmp_path, monkeypatch):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot replace what is in it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = _choice(monkeypatch, sticky / "a" / "cache")
    assert choice.folder == sticky / "a" / "cache" / "numba"
    for path in (sticky / "a", sticky / "a" / "cache", choice.folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_existing_private_cache_folder_is_used(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)  # readable by others is fine: only writing is refused
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _choice(monkeypatch, folder).folder == folder / "numba"


def test_unexpandable_cache_dir_warns_instead_of_failing(tmp_path, monkeypatch):
    name = "~daskdepth-no-such-user/x"
    with pytest.warns(KernelCacheWarning, match="cannot be expanded.*set DASKDEPTH_CACHE_DIR "
                                               "to an absolute path"):
        assert _choice(monkeypatch, name).folder is None
    # In a fresh process: import, compile a kernel and run a CLI command.
    out = _probe(tmp_path, DASKDEPTH_CACHE_DIR=name)
    assert all(p is None for p in out["paths"].values())
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "daskdepth", "--help"], capture_output=True,
                          text=True, timeout=300, env={**base, "DASKDEPTH_CACHE_DIR": name},
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("damage", ["truncated data", "garbage index"])
def test_unreadable_cache_entry_is_compiled_again(tmp_path, damage):
    cache_dir = str(tmp_path / "dd")
    _probe(tmp_path, DASKDEPTH_CACHE_DIR=cache_dir)
    index = _kernel_index(tmp_path / "dd")
    (data,) = index.parent.glob(index.name[:-len(".nbi")] + ".*.nbc")
    if damage == "truncated data":
        data.write_bytes(data.read_bytes()[:100])
    else:
        index.write_bytes(b"garbage, not a pickle")
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env = {**base, "DASKDEPTH_CACHE_DIR": cache_dir}
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # compiled afresh, not UnpicklingError
    assert "KernelCacheWarning" in proc.stderr and "compiled again" in proc.stderr
    # The entry was replaced: the next process loads it without a word.
    again = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", _PROBE],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "KernelCacheWarning" not in again.stderr


def test_folders_above_home_are_not_checked(tmp_path, monkeypatch):
    """As ssh: above the home directory the folders are the system's (a test home here)."""
    above = tmp_path / "shared"
    above.mkdir()
    above.chmod(0o777)  # would be refused for a folder outside the home directory
    home = above / "me"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("HOME", str(home))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _choice(monkeypatch, home / ".cache" / "dd").folder == home / ".cache" / "dd" / \
            "numba"
    home.chmod(0o777)  # the home directory itself is checked
    with pytest.warns(KernelCacheWarning, match=f"{home}, is writable by other users"):
        assert _choice(monkeypatch, home / ".cache" / "dd2").folder is None


# ------------------------------------------------------------------ the README's promises
# What a new user reads first: the set-up commands, the demo's picture, the quick start.

def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _readme_commands() -> list[str]:
    block = _readme().split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.strip().splitlines()]


def _quick_start_blocks() -> list[str]:
    text = _readme()
    start = text.index("\n## Quick start\n")
    section = text[start:text.index("\n## ", start + 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def _extras(spec: str) -> set[str]:
    """The extras a ``pip install`` target such as ``.[plot,dashboard]`` names."""
    found = re.fullmatch(r"[^\[\]]+(?:\[([^\]]*)\])?", spec)
    assert found, spec
    return {e.strip() for e in (found.group(1) or "").split(",") if e.strip()}


def test_readme_first_command_installs_what_the_demo_picture_needs():
    """``pip install ... && daskdepth demo`` on a fresh machine gets matplotlib, so a picture."""
    install, demo = (part.strip() for part in _readme_commands()[0].split("&&"))
    assert demo == "daskdepth demo"
    words = shlex.split(install)
    assert words[:2] == ["pip", "install"]
    (target,) = [w for w in words[2:] if not w.startswith("-")]
    extras = _extras(target)
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    installed = list(project["dependencies"])
    for extra in extras:
        installed += project["optional-dependencies"][extra]
    names = {re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower() for req in installed}
    assert "matplotlib" in names, f"README's first command installs {sorted(names)}"


def test_demo_picture_draws_the_outliers_in_a_colour_the_cloud_does_not_use(tmp_path,
                                                                          monkeypatch):
    """At the planted outliers' pixels, a colour that no pixel of the other rows has."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from daskdepth.cli.demo import demo_data, save_picture

    X, planted = demo_data(4000)  # fewer rows than the picture samples: every row is drawn
    model = daskdepth.AIIRW(random_state=0, contamination=0.02).fit(X)
    depth = model.score_samples(X)
    saved: list = []
    savefig = Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    assert save_picture(tmp_path / "demo.png", model, X, depth)
    assert (tmp_path / "demo.png").stat().st_size > 0
    (fig,) = saved
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3] / 255.0
    (ax,) = [a for a in fig.axes if a.get_xlabel().startswith("feature 0")]
    xy = ax.transData.transform(X[:, :2])  # display pixels, y upwards
    colour = pixels[np.round(pixels.shape[0] - xy[:, 1]).astype(int),
                    np.round(xy[:, 0]).astype(int)]
    outlier_colour = np.median(colour[planted], axis=0)
    # the other rows' pixels, away from any outlier's marker
    gap = np.hypot(*(xy[:, None, :] - xy[None, planted, :]).transpose(2, 0, 1)).min(axis=1)
    cloud = colour[~planted & (gap > 6)]
    assert cloud.shape[0] > 1000
    distance = np.linalg.norm(cloud - outlier_colour, axis=1)
    # Before, points were coloured by depth: the outliers had the colour of the cloud's edge.
    assert np.percentile(distance, 5) > 0.3, (outlier_colour, np.percentile(distance, [1, 5]))


def test_readme_quick_start_uses_the_headline_configuration():
    """The quick start's detector is configured as the headline AUROC row says (MCD)."""
    row = next(line for line in _readme().splitlines()
               if line.startswith("| AUROC, AI-IRW"))
    said = re.search(r"AI-IRW with (\w+)", row)
    assert said, row
    covariance = {"MCD": "mcd", "sample": "sample"}[said.group(1)]
    calls = [node for node in ast.walk(ast.parse(_quick_start_blocks()[0]))
             if isinstance(node, ast.Call) and ast.unparse(node.func) == "daskdepth.AIIRW"]
    assert calls
    for call in calls:
        given = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        assert given.get("covariance", "sample") == covariance, ast.unparse(call)


def test_readme_cluster_example_runs_as_a_script():
    """A local cluster started at a script's top level fails (its workers import the script)."""
    (block,) = [b for b in _quick_start_blocks() if "Client(" in b]
    tree = ast.parse(block)
    guards = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test) == "__name__ == '__main__'"]
    assert len(guards) == 1, "the cluster example needs an if __name__ == '__main__': guard"
    top = [node for node in tree.body if node is not guards[0]]
    assert not any(isinstance(n, ast.Call) for node in top for n in ast.walk(node)), \
        "only imports belong outside the guard"


def test_readme_says_how_long_the_tests_take_and_names_the_quick_subset():
    text = _readme()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    (line,) = [x for x in block.splitlines() if "python -m pytest" in x]
    assert re.search(r"#.*\d+\s*(-\s*\d+\s*)?min", line), line  # the time, beside the command
    before_first_section = text[:text.index("\n## ")]
    assert 'python -m pytest -m "not slow and not heavy"' in before_first_section
