"""The kernel cache cannot be used to run code as the user (issue 37, B6).

Numba's cache files (``.nbi`` index, ``.nbc`` data) are pickles, loaded as the
user: whoever can write them, or replace a folder on the way to them, runs code
in every process that loads a kernel.  So the real path (symbolic links
resolved) is checked as ssh checks its keys, the tree stays private whatever
the umask, and a tree with an entry that someone else could have written is
refused before anything in it is read.

Runs as root in CI: root bypasses permission checks, so ownership and modes are
checked by reading ``st_uid`` and ``st_mode``, and another user is simulated by
giving files to user id 65534 (``nobody``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import cloudpickle
import pytest
from numba.core import caching as numba_caching

from daskdepth.errors import KernelCacheWarning
from daskdepth.kernels import _jit
from daskdepth.runtime.warm import compile_apart

#: Compiles one kernel and prints, as JSON, the cache folder, the kernel's cache
#: folder (None: not cached) and its cache hits and misses.
_PROBE = """
import json
import numba
from daskdepth.kernels import _jit
from daskdepth.kernels.hashing import splitmix64
splitmix64(numba.uint64(1))
print(json.dumps({
    "folder": None if _jit.kernel_cache_dir() is None else str(_jit.kernel_cache_dir()),
    "path": getattr(splitmix64._cache, "_cache_path", None),
    "hits": sum(splitmix64.stats.cache_hits.values()),
    "misses": sum(splitmix64.stats.cache_misses.values()),
}))
"""

NOBODY = 65534
as_root = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                             reason="giving files to another user needs root")
posix = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")


def _run(tmp_path: Path, cache: Path, umask: int = 0o022) -> tuple[dict, str]:
    """Run the probe in a new process with ``DASKDEPTH_CACHE_DIR=cache``: its JSON and stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["DASKDEPTH_CACHE_DIR"] = str(cache)
    script = f"import os; os.umask({umask:#o})\n" + _PROBE
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _choice(monkeypatch, folder) -> _jit.CacheChoice:
    """The cache chosen for ``DASKDEPTH_CACHE_DIR=folder`` (not this process's choice)."""
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(folder))
    return _jit.cache_choice.__wrapped__()


def _modes(top: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``top`` (itself included): its kind and permission bits."""
    found = {}
    for path in (top, *top.rglob("*")):
        st = os.lstat(path)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "?"
        found[str(path.relative_to(top))] = (kind, stat.S_IMODE(st.st_mode))
    return found


# ------------------------------------------------------------- (a) the real path is checked

@posix
@pytest.mark.parametrize("sticky", [False, True], ids=["plain", "sticky"])
def test_a_link_into_a_folder_others_can_write_is_refused(tmp_path, monkeypatch, sticky):
    """~/.cache/daskdepth as a link to a folder in a world-writable one: refused.

    The cache folder it leads to is the user's and private, so only its real
    parent shows the danger: without the sticky bit anyone may rename the
    cache away and put theirs in its place; with it, the parent's owner (here
    another user, who made the shared folder) still may.
    """
    if sticky and (os.geteuid() != 0):
        pytest.skip("a shared folder of another user needs root to make")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777 if sticky else 0o777)
    if sticky:
        os.chown(shared, NOBODY, -1)
    target = shared / "cache"
    target.mkdir(mode=0o700)
    home_cache = tmp_path / "home" / ".cache"
    home_cache.mkdir(parents=True, mode=0o700)
    link = home_cache / "daskdepth"
    link.symlink_to(target)
    expected = "owned by user id 65534" if sticky else "without the sticky bit"
    with pytest.warns(KernelCacheWarning, match=f"{shared}.*{expected}"):
        choice = _choice(monkeypatch, link)
    assert choice.folder is None
    assert not (target / "numba").exists()  # nothing made there


@posix
def test_a_link_to_a_private_folder_is_used_by_its_real_path(tmp_path, monkeypatch):
    target = tmp_path / "disk" / "cache"
    target.mkdir(parents=True, mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = _choice(monkeypatch, link)
    # Numba is given the real path: the link is not followed again after the check
    assert choice.folder == target.resolve() / "numba"
    assert choice.tree == choice.folder


@as_root
def test_a_sticky_folder_is_accepted_only_with_the_next_folder_yours_or_roots(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, -1)
    # theirs is not private: the rule for the cache folder refuses it first
    assert "owned by user id 65534" in _jit._unsafe_chain(theirs / "cache", theirs / "cache")
    # and as a folder above, the next one on the way out of a sticky folder
    why = _jit.unsafe_folder(sticky, private=False, below=theirs)
    assert f"{theirs}, in the folder {sticky} that others can write" in why
    mine = sticky / "mine"
    mine.mkdir(mode=0o700)
    assert _jit.unsafe_folder(sticky, private=False, below=mine) == ""


# ------------------------------------------------------------- (b) the whole tree is private

@posix
def test_under_umask_002_the_tree_is_private_and_then_used(tmp_path):
    """A real compile under umask 002: folders 0700 and files 0600; the next process loads them."""
    cache = tmp_path / "dd"
    out, err = _run(tmp_path, cache, umask=0o002)
    assert out["path"] is not None and out["misses"] > 0, err  # compiled and cached
    modes = _modes(cache)
    assert any(name.endswith(".nbi") for name in modes) and any(
        name.endswith(".nbc") for name in modes)
    assert {name: m for name, m in modes.items()
            if m != (("dir", 0o700) if m[0] == "dir" else ("file", 0o600))} == {}
    # the clean private tree is then used: loaded from the cache, without a word
    again, err = _run(tmp_path, cache, umask=0o002)
    assert "KernelCacheWarning" not in err
    assert again["path"] == out["path"]
    assert again["hits"] > 0 and again["misses"] == 0


class _Plant:
    """A pickle that creates the file it names when it is loaded (what a planted index could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _cached_index(tmp_path: Path, cache: Path) -> Path:
    """Cache the probe's kernel under ``cache``; the path of its index file."""
    out, _ = _run(tmp_path, cache)
    (index,) = Path(out["path"]).glob("*splitmix64*.nbi")
    return index


@posix
@pytest.mark.parametrize("damage", [
    "group-writable file",
    "file others can write",
    "group-writable folder",
    "link to a file elsewhere",
    pytest.param("file of another user", marks=as_root),
    pytest.param("folder of another user", marks=as_root),
])
def test_a_tree_someone_else_could_write_is_refused_before_reading(tmp_path, damage):
    cache = tmp_path / "dd"
    index = _cached_index(tmp_path, cache)
    marker = tmp_path / "code-ran"
    plant = pickle.dumps(_Plant(marker))
    os.unlink(index)
    if damage == "link to a file elsewhere":
        elsewhere = tmp_path / "elsewhere.nbi"
        elsewhere.write_bytes(plant)
        elsewhere.chmod(0o600)
        index.symlink_to(elsewhere)
        expected = f"{index} is a symbolic link"
    else:
        index.write_bytes(plant)
        index.chmod(0o600)
        if damage == "group-writable file":
            index.chmod(0o620)
            expected = f"{index} is writable by other users \\(mode 0620\\)"
        elif damage == "file others can write":
            index.chmod(0o602)
            expected = f"{index} is writable by other users \\(mode 0602\\)"
        elif damage == "group-writable folder":
            index.parent.chmod(0o770)
            expected = f"{index.parent} is writable by other users \\(mode 0770\\)"
        elif damage == "file of another user":
            os.chown(index, NOBODY, -1)
            expected = f"{index} is owned by user id {NOBODY}, not by you"
        else:
            os.chown(index.parent, NOBODY, -1)
            expected = f"{index.parent} is owned by user id {NOBODY}, not by you"
    out, err = _run(tmp_path, cache)
    assert not marker.exists()  # the planted index was never unpickled
    assert out["path"] is None and out["folder"] is None  # compiled, not cached
    assert "KernelCacheWarning" in err
    assert re.search(expected, err), err
    assert f"delete the folder {cache / 'numba'}" in err  # the fix


@posix
def test_an_unsafe_tree_is_refused_in_process_too(tmp_path, monkeypatch):
    folder = tmp_path / "dd"
    (folder / "numba").mkdir(parents=True, mode=0o700)
    stray = folder / "numba" / "ready-x"
    stray.write_text("x")
    stray.chmod(0o664)
    with pytest.warns(KernelCacheWarning, match=f"{stray} is writable by other users"):
        choice = _choice(monkeypatch, folder)
    assert choice.folder is None and choice.tree is None


@posix
def test_a_users_numba_cache_dir_keeps_daskdepths_folder_private(tmp_path, monkeypatch):
    """In the user's NUMBA_CACHE_DIR, daskdepth's kernels' folder is made 0700 and checked.

    The user's own cache files beside it are theirs: not checked.
    """
    own = tmp_path / "numba-cache"
    own.mkdir(mode=0o700)
    (own / "their_module_0123").mkdir(mode=0o775)  # the user's own functions, under umask 002
    monkeypatch.delenv("DASKDEPTH_CACHE_DIR", raising=False)
    monkeypatch.setattr(_jit.numba_config, "CACHE_DIR", str(own))
    # where Numba caches the functions of daskdepth/kernels (its own rule for the name)
    kernels = own / numba_caching._CacheLocator.get_suitable_cache_subpath(
        str(Path(_jit.__file__).resolve()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = _jit.cache_choice.__wrapped__()
    assert choice.numba_own and choice.folder == own
    assert kernels.is_dir() and stat.S_IMODE(kernels.stat().st_mode) == 0o700
    kernels.chmod(0o775)
    with pytest.warns(KernelCacheWarning, match=f"{kernels} is writable by other users"):
        assert _jit.cache_choice.__wrapped__().folder is None


# ------------------------------------------------------------- the warm-up's record and lock

def _nothing() -> None:
    """A warm-up job that compiles nothing."""


@posix
def test_the_warm_up_record_is_private_under_umask_002(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(tmp_path / "dd"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    folder = _choice(monkeypatch, tmp_path / "dd").folder
    marker = folder / "ready-test"
    job = cloudpickle.dumps((_nothing, "nothing cached"))
    old = os.umask(0o002)
    try:
        assert compile_apart(job, marker) == "compiled apart"
    finally:
        os.umask(old)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert _jit.unsafe_tree(folder) == ""


@posix
def test_the_warm_up_writes_no_record_for_a_refused_cache(tmp_path, monkeypatch):
    """The process apart checks the cache as the worker did: refused there, no record."""
    monkeypatch.setenv("DASKDEPTH_CACHE_DIR", str(tmp_path / "dd"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    folder = _choice(monkeypatch, tmp_path / "dd").folder
    (folder / "planted").write_text("x")
    (folder / "planted").chmod(0o666)  # after the worker's check, before the process apart
    marker = folder / "ready-test"
    how = compile_apart(cloudpickle.dumps((_nothing, "nothing cached")), marker)
    assert how.startswith("not compiled apart"), how
    assert "not used" in how
    assert not marker.exists()
