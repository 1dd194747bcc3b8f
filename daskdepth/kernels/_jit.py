"""The one Numba decorator of the package's compiled kernels, and where their cache lives.

Kernels are compiled without the GIL (tasks run on threads) and cached on disk
in a per-user directory, never next to the package's source: Numba's default
(``cache=True`` without ``NUMBA_CACHE_DIR``) writes ``__pycache__`` folders
inside ``site-packages/daskdepth``, which outlive an uninstall and then shadow a
later (e.g. editable) install of the package as an empty namespace package.

The directory, first match wins:

1. ``DASKDEPTH_CACHE_DIR`` (environment): kernels go to its ``numba`` folder;
2. ``NUMBA_CACHE_DIR`` (environment, or ``numba.config.CACHE_DIR``): the user's
   own choice for every Numba cache, left as it is;
3. the platform's user cache directory: ``$XDG_CACHE_HOME/daskdepth/numba``
   (default ``~/.cache/daskdepth/numba``) on Linux,
   ``~/Library/Caches/daskdepth/numba`` on macOS,
   ``%LOCALAPPDATA%\\daskdepth\\numba`` on Windows.

Numba's cache index files are pickles, run when a kernel is loaded: whoever can
write into the cache folder can run code in every process that loads a kernel.
So, as ssh does with its keys, a cache folder is used only when it is private
(:func:`unsafe_folder`): the cache folder and the folder chosen for it
(``DASKDEPTH_CACHE_DIR``, ``NUMBA_CACHE_DIR`` or the ``daskdepth`` user cache
folder) owned by the user and writable by nobody else, and every folder above
them (up to the home directory for a folder inside it, else up to ``/``) owned
by the user or root and writable by nobody else unless it has the sticky bit
(as ``/tmp``: others cannot rename or replace what is in it).  Missing
folders are created with mode 0700.  A folder that is not private, or that
cannot be created or written, or a path that cannot be expanded (``~nobody``),
makes daskdepth compile its kernels in every process instead (no cache), with a
:class:`~daskdepth.errors.KernelCacheWarning` naming the folder and the fix:
never a failure, not even at ``import daskdepth``.

A cache entry that cannot be read (a truncated ``.nbc`` file, a garbage
``.nbi`` index: Numba's own ``UnpicklingError``) is dropped and the kernel
compiled afresh, with one warning per process, and the fresh entry replaces it.

The choice is made once per process, and applied per kernel when its module is
imported, by setting ``numba.config.CACHE_DIR`` only while the kernel is
decorated (Numba reads it there and keeps the path), so the user's own Numba
functions and settings are untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numba
from numba.core import config as numba_config

from ..errors import KernelCacheWarning

#: Environment variable naming daskdepth's cache directory (kernels in its ``numba`` folder).
CACHE_ENV = "DASKDEPTH_CACHE_DIR"

_lock = threading.Lock()
#: Every kernel made by :func:`kernel`, for :func:`kernels_cached`.
_KERNELS: list[Any] = []
#: Whether the warning about an unreadable cache entry was given in this process.
_warned_entry = False


def user_cache_root() -> Path:
    """The platform's per-user cache directory for daskdepth (not created here).

    Raises RuntimeError when the home directory cannot be determined.

    Examples
    --------
    >>> user_cache_root().name
    'daskdepth'
    """
    if sys.platform == "win32":  # pragma: no cover - platform specific
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":  # pragma: no cover - platform specific
        base = str(Path.home() / "Library" / "Caches")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else str(Path.home() / ".cache")  # XDG: absolute only
    return Path(base) / "daskdepth"


class CacheChoice(NamedTuple):
    """Where kernels are cached: ``folder`` (None: not cached), and the folder chosen for it.

    ``private`` is the folder the user or the platform names for the cache
    (``DASKDEPTH_CACHE_DIR``, ``NUMBA_CACHE_DIR``, the user cache folder), held
    to the same rule as ``folder``; ``numba_own``: ``folder`` is Numba's own
    setting, left to Numba; ``why``: why there is no cache.
    """

    folder: Path | None
    private: Path | None
    numba_own: bool
    why: str = ""


def _choose() -> CacheChoice:
    """The cache folder the settings name, before any check (nothing created)."""
    explicit = os.environ.get(CACHE_ENV, "")
    try:
        if explicit:
            root = Path(os.path.abspath(Path(explicit).expanduser()))
            return CacheChoice(root / "numba", root, False)
        if numba_config.CACHE_DIR:
            own = Path(os.path.abspath(numba_config.CACHE_DIR))
            return CacheChoice(own, own, True)
        root = Path(os.path.abspath(user_cache_root()))
    except RuntimeError as exc:  # '~nobody/x', or no home directory at all
        named = f"{CACHE_ENV}={explicit!r}" if explicit else "the user cache folder"
        return CacheChoice(None, None, False, f"{named} cannot be expanded ({exc})")
    return CacheChoice(root / "numba", root, False)


def unsafe_folder(path: Path, private: bool) -> str:
    """Why the existing folder ``path`` may not hold cached kernels; '' when it may.

    ``private``: the cache folder itself (or the folder chosen for it), which
    must be a directory owned by the user and writable by nobody else;
    otherwise a folder above it, which must be owned by the user or root and
    writable by nobody else unless it has the sticky bit.  Symbolic links are
    followed (what they point to is what is checked).  Always '' where folders
    have no POSIX owners (Windows).

    Examples
    --------
    >>> import tempfile
    >>> unsafe_folder(Path(tempfile.mkdtemp()), private=True)
    ''
    """
    if os.name != "posix":  # pragma: no cover - platform specific
        return ""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    uid = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if private:
        if st.st_uid != uid:
            return f"{path} is owned by user id {st.st_uid}, not by you (user id {uid})"
        if mode & 0o022:
            return f"{path} is writable by other users (mode {mode:04o})"
        return ""
    if st.st_uid not in (uid, 0):
        return (f"the folder above it, {path}, is owned by user id {st.st_uid}, neither you nor "
                "root")
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return (f"the folder above it, {path}, is writable by other users without the sticky "
                f"bit (mode {mode:04o}), so they can replace what is in it")
    return ""


def _home() -> Path | None:
    try:
        return Path(os.path.abspath(Path.home()))
    except (RuntimeError, KeyError, OSError):
        return None


def _unsafe_chain(folder: Path, private: Path) -> str:
    """Why ``folder`` or a folder above it (those that exist) is not safe; '' when all are.

    As ssh does, the folders above the user's home directory are not checked
    for a folder inside it (they are the system's: on some clusters a service
    account owns them); for a folder elsewhere, every folder up to ``/`` is.
    """
    home = _home()
    inside_home = home is not None and folder.is_relative_to(home) and folder != home
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            why = unsafe_folder(path, private=path == folder or path == private)
            if why:
                return why
        if inside_home and path == home:
            break
    return ""


def _refused(choice: CacheChoice, why: str) -> CacheChoice:
    return choice._replace(folder=None, why=why)


@cache
def cache_choice() -> CacheChoice:
    """Where this process caches kernels (checked, created 0700, warned once when not).

    ``folder`` is None when kernels are compiled without a cache; ``why`` then
    says why, and a :class:`~daskdepth.errors.KernelCacheWarning` said it too.
    """
    choice = _choose()
    if choice.folder is not None and choice.private is not None:
        folder, private = choice.folder, choice.private
        why = _unsafe_chain(folder, private)
        if not why:
            try:
                # missing folders: made by us, for us alone (umask can only take bits away)
                for path in reversed((folder, *folder.parents)):
                    if not os.path.lexists(path):
                        path.mkdir(mode=0o700)
                why = _unsafe_chain(folder, private)  # again: what now exists, and any race
                if not why:
                    tempfile.TemporaryFile(dir=folder).close()
            except OSError as exc:
                why = f"{folder} cannot be created or written ({exc.strerror or exc})"
        if why:
            choice = _refused(choice, why)
    if choice.folder is None:
        fix = (f"set {CACHE_ENV} to an absolute path" if choice.private is None else
               f"use a folder that only you can write, in folders only you or root can change "
               f"(e.g. mkdir -m 700 a new one and set {CACHE_ENV} to it)")
        warnings.warn(
            f"daskdepth does not cache its compiled kernels: {choice.why}. They are compiled "
            f"in every process instead (about 20 s each). Fix: {fix}",
            KernelCacheWarning, stacklevel=2)
    return choice


def kernel_cache_dir() -> Path | None:
    """Where daskdepth's compiled kernels are cached; None: they are not cached.

    Examples
    --------
    >>> path = kernel_cache_dir()
    >>> path is None or path.is_dir()
    True
    """
    return cache_choice().folder


@contextlib.contextmanager
def _numba_cache_dir(path: Path) -> Iterator[None]:
    # Numba's user-provided locator reads numba.config.CACHE_DIR when a function is
    # decorated and keeps the path; numba.config keeps values set from Python (its
    # reload_config() only re-reads when a NUMBA_* variable changes), and restoring
    # the old value leaves the user's settings as they were.
    with _lock:
        old = numba_config.CACHE_DIR
        numba_config.CACHE_DIR = str(path)
        try:
            yield
        finally:
            numba_config.CACHE_DIR = old


def _drop_entry(cache_obj: Any) -> None:
    """Remove a kernel's index and data files (all its signatures): the next save rewrites them."""
    files = getattr(cache_obj, "_cache_file", None)
    index = getattr(files, "_index_path", None)
    if not isinstance(index, str):
        return
    base = index[:-len(".nbi")] if index.endswith(".nbi") else index
    for path in (index, *(str(p) for p in Path(base).parent.glob(Path(base).name + ".*.nbc"))):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _warn_entry(cache_obj: Any, exc: BaseException) -> None:
    global _warned_entry
    if _warned_entry:
        return
    _warned_entry = True
    where = getattr(cache_obj, "_cache_path", None) or "the kernel cache"
    warnings.warn(
        f"a cached daskdepth kernel in {where} could not be read ({type(exc).__name__}: {exc});"
        " it is compiled again and its cache entry replaced. If this message comes back in "
        f"every run, delete the folder {where}", KernelCacheWarning, stacklevel=3)


def _guard_cache(dispatcher: Any) -> None:
    """Make an unreadable cache entry a recompilation, not an error of every job.

    Numba loads an entry with ``pickle`` and lets its errors through
    (``UnpicklingError: pickle data was truncated`` for a cut ``.nbc``), and
    saving re-reads the index first, so a bad index would also fail the save:
    both are caught here; a failed load drops the kernel's entry (its files)
    so that the fresh compilation writes a good one.
    """
    cache_obj = getattr(dispatcher, "_cache", None)
    load = getattr(cache_obj, "load_overload", None)
    save = getattr(cache_obj, "save_overload", None)
    if load is None or save is None:  # pragma: no cover - another numba's internals
        return

    def load_overload(sig: Any, target_context: Any) -> Any:
        try:
            return load(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry: compile instead
            _warn_entry(cache_obj, exc)
            _drop_entry(cache_obj)
            return None

    def save_overload(sig: Any, data: Any) -> None:
        try:
            save(sig, data)
        except Exception as exc:  # noqa: BLE001 - the kernel is compiled; the cache is optional
            _warn_entry(cache_obj, exc)
            _drop_entry(cache_obj)

    cache_obj.load_overload = load_overload
    cache_obj.save_overload = save_overload


def kernel(func: Callable[..., Any]) -> Any:
    """``numba.njit(nogil=True, cache=True)``, cached in :func:`kernel_cache_dir`."""
    choice = cache_choice()
    if choice.folder is None:  # compile in every process rather than use an unsafe cache
        compiled = numba.njit(nogil=True, cache=False)(func)
    elif choice.numba_own:  # the user's NUMBA_CACHE_DIR
        compiled = numba.njit(nogil=True, cache=True)(func)
    else:
        with _numba_cache_dir(choice.folder):
            compiled = numba.njit(nogil=True, cache=True)(func)
    if choice.folder is not None:
        _guard_cache(compiled)
    _KERNELS.append(compiled)
    return compiled


def kernels_cached(share: float = 0.5) -> bool:
    """Whether at least ``share`` of the kernels imported so far have compiled code on disk.

    When not, the next job compiles them first (tens of seconds), which
    the demo says.  An estimate: a kernel counts as cached when its cache
    directory holds an index for it (its signatures may still differ).
    """
    if not _KERNELS:
        return False
    found = 0
    for dispatcher in _KERNELS:
        path = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
        if path is None:
            continue
        module = dispatcher.py_func.__module__.rpartition(".")[2]
        found += any(Path(path).glob(f"{module}.{dispatcher.py_func.__qualname__}-*.nbi"))
    return found >= share * len(_KERNELS)


def compiled_here() -> dict[str, int]:
    """Signatures this process compiled, not found in the cache, per kernel (``module.name``).

    Zero everywhere when every kernel a job used came from the cache.

    Examples
    --------
    >>> all(n >= 0 for n in compiled_here().values())
    True
    """
    with _lock:
        kernels = list(_KERNELS)
    return {f"{k.py_func.__module__.rpartition('.')[2]}.{k.py_func.__qualname__}":
            sum(k.stats.cache_misses.values()) for k in kernels}


def kernels_stamp() -> str:
    """A digest of the kernels' sources (name, size, modification time) and of Numba's version.

    Numba keeps a cache entry only while its module's size and modification
    time are unchanged; a record of what the cache holds (:func:`ready_marker`)
    is keyed on the same facts, so it goes stale with the entries.
    """
    digest = hashlib.sha256(f"{numba.__version__} {sys.version_info[:2]}".encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):  # the kernel modules
        st = path.stat()
        digest.update(f"{path.name} {st.st_size} {st.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def ready_marker(kind: str) -> Path | None:
    """The file that says the kernel cache holds what a job of ``kind`` compiles; None: no cache.

    Written (plain text) once a job of that kind has run with this cache, so
    that later processes only load the cached kernels.  Its name carries
    :func:`kernels_stamp`: after an upgrade the job's kernels are compiled
    again.

    Examples
    --------
    >>> marker = ready_marker("a kind of job")
    >>> marker is None or marker.name.startswith("ready-")
    True
    """
    folder = kernel_cache_dir()
    if folder is None:
        return None
    name = hashlib.sha256(f"{kind} {kernels_stamp()}".encode()).hexdigest()[:24]
    return folder / f"ready-{name}"
