"""The one Numba decorator of the package's compiled kernels, and where their cache lives.

Kernels are compiled without the GIL (tasks run on threads) and cached on disk
in a per-user directory, never next to the package's source: Numba's default
(``cache=True`` without ``NUMBA_CACHE_DIR``) writes ``__pycache__`` folders
inside ``site-packages/daskdepth``, which outlive an uninstall and then shadow a
later (e.g. editable) install of the package as an empty namespace package.

The directory, first match wins:

1. ``DASKDEPTH_CACHE_DIR`` (environment): kernels go to its ``numba`` folder;
2. ``NUMBA_CACHE_DIR`` (environment, or ``numba.config.CACHE_DIR``): the user's
   own choice for every Numba cache, left as it is (daskdepth's kernels go to
   its real path);
3. the platform's user cache directory: ``$XDG_CACHE_HOME/daskdepth/numba``
   (default ``~/.cache/daskdepth/numba``) on Linux,
   ``~/Library/Caches/daskdepth/numba`` on macOS,
   ``%LOCALAPPDATA%\\daskdepth\\numba`` on Windows.

Numba's cache index files are pickles, run when a kernel is loaded: whoever can
write into the cache folder, or into anything in it, can run code in every
process that loads a kernel.  So, as ssh does with its keys, a cache is used
only when it is private:

* the path is resolved first (symbolic links followed, as ssh's
  ``realpath``), and what is checked, created and given to Numba is that real
  path, so a link cannot be pointed elsewhere after the check;
* along the real path (:func:`unsafe_folder`), the cache folder and the folder
  chosen for it (``DASKDEPTH_CACHE_DIR``, ``NUMBA_CACHE_DIR`` or the
  ``daskdepth`` user cache folder) are owned by the user and writable by
  nobody else, and every folder above them (up to the home directory for a
  folder inside it, else up to ``/``) is owned by the user or root and
  writable by nobody else, unless it has the sticky bit (as ``/tmp``) and the
  next folder on the way is the user's or root's (others cannot rename or
  replace it then);
* everything in the cache tree (:func:`unsafe_tree`: the whole ``numba``
  folder of ``DASKDEPTH_CACHE_DIR`` or of the user cache folder; the folder
  of daskdepth's kernels in a ``NUMBA_CACHE_DIR``) is owned by the user,
  writable by nobody else, and no symbolic link: checked before Numba reads
  any of it.

Whatever the umask (002 on many systems, JupyterHub, HPC centres), the tree
stays private: daskdepth creates its folders with mode 0700 (the kernels'
folder too, before Numba would make it with the umask's mode), Numba's
cache files are written 0600 (:func:`_private_writes`), and modes are
tightened after each save.  A folder that is not private, an entry of the
tree that others own or can write, a folder that cannot be created or
written, or a path that cannot be expanded (``~nobody``), makes daskdepth
compile its kernels in every process instead (no cache), with a
:class:`~daskdepth.errors.KernelCacheWarning` naming the folder or entry and
the fix: never a failure, not even at ``import daskdepth``.

A cache entry that cannot be read (a truncated ``.nbc`` file, a garbage
``.nbi`` index: Numba's own ``UnpicklingError``) is dropped and the kernel
compiled afresh, with one warning per process, and the fresh entry replaces it.
An entry that names a type or module this version does not have (written by
another version of daskdepth at the same path) is stale, not damaged: it is
dropped and replaced the same way, without a warning.  Every dropped entry is
logged at ``DEBUG`` level on the ``daskdepth.kernels._jit`` logger (the
kernel, the exception) and counted per process
(:func:`dropped_cache_entries`), so that an entry dropped in every process
(the kernel compiled each time) can be seen.

The choice is made once per process, and applied per kernel when its module is
imported, by setting ``numba.config.CACHE_DIR`` only while the kernel is
decorated (Numba reads it there and keeps the path), so the user's own Numba
functions and settings are untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import sys
import tempfile
import threading
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numba
from numba.core import caching as numba_caching
from numba.core import config as numba_config

from ..errors import KernelCacheWarning

#: Environment variable naming daskdepth's cache directory (kernels in its ``numba`` folder).
CACHE_ENV = "DASKDEPTH_CACHE_DIR"

_lock = threading.Lock()
#: Every kernel made by :func:`kernel`, for :func:`kernels_cached`.
_KERNELS: list[Any] = []
#: Whether the warning about an unreadable cache entry was given in this process.
_warned_entry = False
_log = logging.getLogger(__name__)
#: Cache entries dropped in this process, per kernel, for :func:`dropped_cache_entries`.
_dropped: Counter[str] = Counter()
_dropped_lock = threading.Lock()


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
    setting (daskdepth's kernels then keep to their folder in it); ``why``:
    why there is no cache; ``tree``: the folder whose every entry was checked
    (:func:`unsafe_tree`) before any was read.  Once checked, ``folder`` and
    ``tree`` are real paths (no symbolic link in them).
    """

    folder: Path | None
    private: Path | None
    numba_own: bool
    why: str = ""
    tree: Path | None = None


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


def _real(path: Path) -> Path:
    """``path`` with every symbolic link of its existing part resolved (the rest as it is)."""
    return Path(os.path.realpath(path))


def unsafe_folder(path: Path, private: bool, below: Path | None = None) -> str:
    """Why the existing folder ``path`` may not hold cached kernels; '' when it may.

    ``private``: the cache folder itself (or the folder chosen for it), which
    must be a directory owned by the user and writable by nobody else;
    otherwise a folder above it, which must be owned by the user or root and
    writable by nobody else, unless it has the sticky bit and ``below``, the
    next folder on the way to the cache, is the user's or root's (with the
    sticky bit only the owner of an entry, of the folder, or root may rename or
    remove it; ``below`` None: it does not exist yet, it will be created the
    user's).  A symbolic link is refused: check the real path
    (``os.path.realpath``), as :func:`cache_choice` does.  Always '' where
    folders have no POSIX owners (Windows).

    Examples
    --------
    >>> import tempfile
    >>> unsafe_folder(Path(tempfile.mkdtemp()), private=True)
    ''
    """
    if os.name != "posix":  # pragma: no cover - platform specific
        return ""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link (it was replaced while being checked)"
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
    if mode & 0o022:
        if not mode & stat.S_ISVTX:
            return (f"the folder above it, {path}, is writable by other users without the "
                    f"sticky bit (mode {mode:04o}), so they can replace what is in it")
        if below is not None:
            try:
                owner = os.lstat(below).st_uid
            except OSError as exc:
                return f"{below} cannot be examined ({exc.strerror})"
            if owner not in (uid, 0):
                return (f"{below}, in the folder {path} that others can write (sticky, mode "
                        f"{mode:04o}), is owned by user id {owner} (neither you nor root), "
                        "who may replace it")
    return ""


def _home() -> Path | None:
    try:
        return _real(Path(os.path.abspath(Path.home())))
    except (RuntimeError, KeyError, OSError):
        return None


def _unsafe_chain(folder: Path, private: Path) -> str:
    """Why the real ``folder`` or a folder above it (those that exist) is not safe; '' when all are.

    ``folder`` and ``private`` are real paths (:func:`_real`).  The folders
    from ``private`` down to ``folder`` must be private (only ``folder`` when
    it is elsewhere: a link led there).  As ssh does, the folders above the
    user's home directory are not checked for a folder inside it (they are the
    system's: on some clusters a service account owns them); for a folder
    elsewhere, every folder up to ``/`` is.
    """
    home = _home()
    inside_home = home is not None and folder.is_relative_to(home) and folder != home
    within = folder.is_relative_to(private)
    below: Path | None = None
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            mine = path == folder or (within and path.is_relative_to(private))
            why = unsafe_folder(path, private=mine, below=below)
            if why:
                return why
            below = path
        if inside_home and path == home:
            break
    return ""


def unsafe_tree(top: Path) -> str:
    """Why an entry of the folder ``top`` (itself included) may not be read; '' when none.

    Every file and folder in it must be owned by the user and writable by
    nobody else (group and others), and none may be a symbolic link or other
    special file: Numba's ``.nbi`` and ``.nbc`` files are pickles, loaded as
    the user.  A missing ``top`` is empty.  Always '' where files have no POSIX
    owners (Windows).

    Examples
    --------
    >>> import tempfile
    >>> unsafe_tree(Path(tempfile.mkdtemp()))
    ''
    """
    if os.name != "posix":  # pragma: no cover - platform specific
        return ""
    uid = os.geteuid()
    todo = [str(top)]
    while todo:
        path = todo.pop()
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # a temporary file of a save, just renamed
            continue
        except OSError as exc:
            return f"{path} cannot be examined ({exc.strerror})"
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link"
        if st.st_uid != uid:
            return f"{path} is owned by user id {st.st_uid}, not by you (user id {uid})"
        if mode & 0o022:
            return f"{path} is writable by other users (mode {mode:04o})"
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(path) as entries:
                    todo.extend(entry.path for entry in entries)
            except FileNotFoundError:
                continue
            except OSError as exc:
                return f"{path} cannot be examined ({exc.strerror})"
        elif not stat.S_ISREG(st.st_mode):
            return f"{path} is not a file nor a folder"
    return ""


def _kernels_folder(folder: Path) -> Path:
    """Where Numba caches daskdepth's kernels (all in this package) under ``folder``."""
    locator = getattr(numba_caching, "_CacheLocator", None)
    subpath = getattr(locator, "get_suitable_cache_subpath", None)
    if subpath is None:  # pragma: no cover - another numba's internals: the whole folder
        return folder
    return folder / subpath(str(Path(__file__).resolve()))


def _make_private(folder: Path) -> None:
    """Create the missing folders of the real path ``folder``, mode 0700 (umask or not)."""
    for path in reversed((folder, *folder.parents)):
        if not os.path.lexists(path):
            path.mkdir(mode=0o700)  # the umask can only take bits away: never group's or others'


#: The fix for a cache folder that is not private, or cannot be made or written.
_FIX_FOLDER = (f"use a folder that only you can write, in folders only you or root can change "
               f"(e.g. mkdir -m 700 a new one and set {CACHE_ENV} to it)")


def _checked(choice: CacheChoice, folder: Path, private: Path) -> tuple[CacheChoice, str, str]:
    """``choice`` checked and its folders made (real paths); else why not, and the fix."""
    real = _real(folder)
    private = _real(private)
    why = _unsafe_chain(real, private)
    if why:
        return choice, why, _FIX_FOLDER
    tree = _kernels_folder(real) if choice.numba_own else real
    try:
        _make_private(real)
        if _real(folder) != real:
            return choice, f"{folder} changed while being checked", _FIX_FOLDER
        why = _unsafe_chain(real, private)  # again: what now exists, and any race
        if why:
            return choice, why, _FIX_FOLDER
        _make_private(tree)  # before Numba makes it with the umask's mode
        why = unsafe_tree(tree)
        if why:
            return choice, (f"{why}, in the kernel cache {tree}, whose files are loaded as "
                            "pickles"), (f"delete the folder {tree} (daskdepth makes it again, "
                                         "private)")
        tempfile.TemporaryFile(dir=tree).close()
    except OSError as exc:
        return choice, f"{real} cannot be created or written ({exc.strerror or exc})", _FIX_FOLDER
    return choice._replace(folder=real, tree=tree), "", ""


@cache
def cache_choice() -> CacheChoice:
    """Where this process caches kernels (checked, created 0700, warned once when not).

    ``folder`` is None when kernels are compiled without a cache; ``why`` then
    says why, and a :class:`~daskdepth.errors.KernelCacheWarning` said it too.
    """
    choice = _choose()
    if choice.folder is None or choice.private is None:
        why, fix = choice.why, f"set {CACHE_ENV} to an absolute path"
    else:
        choice, why, fix = _checked(choice, choice.folder, choice.private)
    if why:
        choice = choice._replace(folder=None, tree=None, why=why)
        warnings.warn(
            f"daskdepth does not cache its compiled kernels: {why}. They are compiled "
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


def _entry_files(cache_obj: Any) -> list[str]:
    """A kernel's index and data files (all its signatures) that exist."""
    files = getattr(cache_obj, "_cache_file", None)
    index = getattr(files, "_index_path", None)
    if not isinstance(index, str):
        return []
    base = index[:-len(".nbi")] if index.endswith(".nbi") else index
    return [index, *(str(p) for p in Path(base).parent.glob(Path(base).name + ".*.nbc"))]


def _drop_entry(cache_obj: Any) -> None:
    """Remove a kernel's index and data files (all its signatures): the next save rewrites them."""
    for path in _entry_files(cache_obj):
        with contextlib.suppress(OSError):
            os.unlink(path)


#: Flags of a new cache file: never through a link, binary on Windows.
_NEW_FILE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))


def _private_writes(cache_obj: Any) -> None:
    """Have Numba write the kernel's cache files with mode 0600, whatever the umask.

    Numba writes each file as a temporary file (``open(..., 'wb')``: mode
    0666 less the umask, so 0664 under umask 002) renamed into place; here
    the temporary file is created 0600 instead, so the cache never holds a file
    that others may write.  The rest is Numba's own way of writing.
    """
    files = getattr(cache_obj, "_cache_file", None)
    if files is None or not hasattr(files, "_open_for_write"):  # pragma: no cover - numba
        return

    @contextlib.contextmanager
    def open_for_write(filepath: str) -> Iterator[Any]:
        tmpname = f"{filepath}.tmp.{uuid.uuid4().hex[:16]}"
        fd = os.open(tmpname, _NEW_FILE, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
            os.replace(tmpname, filepath)
        except Exception:
            with contextlib.suppress(OSError):
                os.unlink(tmpname)
            raise

    files._open_for_write = open_for_write


def _tighten(cache_obj: Any) -> None:
    """After a save: the kernel's folder 0700 and its files 0600 where they are more open."""
    if os.name != "posix":  # pragma: no cover - platform specific
        return
    folder = getattr(cache_obj, "_cache_path", None)
    uid = os.geteuid()
    for path, mode in [*([(folder, 0o700)] if isinstance(folder, str) else []),
                       *((path, 0o600) for path in _entry_files(cache_obj))]:
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if (st.st_uid == uid and not stat.S_ISLNK(st.st_mode)
                    and stat.S_IMODE(st.st_mode) & ~mode):
                os.chmod(path, mode)


def _warn_entry(cache_obj: Any, exc: BaseException) -> None:
    global _warned_entry
    if _warned_entry:
        return
    _warned_entry = True
    where = getattr(cache_obj, "_cache_path", None) or "the kernel cache"
    warnings.warn(
        f"a cached daskdepth kernel in {where} could not be read ({type(exc).__name__}: {exc});"
        " it is compiled again and its cache entry replaced. If this message comes back in "
        f"every run, delete the folder {where}", KernelCacheWarning, stacklevel=4)


def _kernel_name(dispatcher: Any) -> str:
    """A kernel's name as :func:`compiled_here` gives it: ``module.name``."""
    func = dispatcher.py_func
    return f"{func.__module__.rpartition('.')[2]}.{func.__qualname__}"


def _drop(name: str, cache_obj: Any, exc: BaseException, when: str) -> None:
    """Drop the kernel ``name``'s cache entry that failed to ``when`` (load or save).

    Logged (``DEBUG``) and counted (:func:`dropped_cache_entries`), and warned
    about once per process (:func:`_warn_entry`) unless the entry names a type
    or module this version of daskdepth does not have (``AttributeError``,
    ``ImportError``: a kernel record moved to another module): written by
    another version at the same path, as stale as an entry of an edited module
    (which Numba drops without a word).  Counted even then, should Numba itself
    ever raise these for every entry.
    """
    with _dropped_lock:
        _dropped[name] += 1
    _log.debug("daskdepth kernel %s: its cache entry in %s failed to %s (%s: %s); dropped, "
               "the kernel is compiled again", name,
               getattr(cache_obj, "_cache_path", None) or "the kernel cache", when,
               type(exc).__name__, exc)
    if not isinstance(exc, (AttributeError, ImportError)):
        _warn_entry(cache_obj, exc)
    _drop_entry(cache_obj)


def dropped_cache_entries() -> dict[str, int]:
    """Cache entries this process dropped, per kernel (``module.name``); only kernels with any.

    An entry is dropped when it cannot be loaded or saved: another version's
    entry (a type or module this version does not have: no warning) or an
    unreadable one (a :class:`~daskdepth.errors.KernelCacheWarning` once per
    process).  Each drop is also logged at ``DEBUG`` level on this module's
    logger.  A kernel whose entry is dropped in every process is compiled in
    every process.

    Examples
    --------
    >>> all(n > 0 for n in dropped_cache_entries().values())
    True
    """
    with _dropped_lock:
        return dict(_dropped)


def _guard_cache(dispatcher: Any) -> None:
    """Make an unreadable cache entry a recompilation, not an error of every job.

    Numba loads an entry with ``pickle`` and lets its errors through
    (``UnpicklingError: pickle data was truncated`` for a cut ``.nbc``), and
    saving re-reads the index first, so a bad index would also fail the save:
    both are caught here; a failed load drops the kernel's entry (its files)
    so that the fresh compilation writes a good one, with a warning unless
    the entry names a type or module this version does not have (written by
    another version of daskdepth installed at the same path: stale, not
    damaged); either way the drop is logged at ``DEBUG`` level and counted
    (:func:`dropped_cache_entries`).  Its files are written 0600
    (:func:`_private_writes`) and tightened after each save (:func:`_tighten`).
    """
    cache_obj = getattr(dispatcher, "_cache", None)
    load = getattr(cache_obj, "load_overload", None)
    save = getattr(cache_obj, "save_overload", None)
    if load is None or save is None:  # pragma: no cover - another numba's internals
        return
    name = _kernel_name(dispatcher)

    def load_overload(sig: Any, target_context: Any) -> Any:
        try:
            return load(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry: compile instead
            _drop(name, cache_obj, exc, "load")
            return None

    def save_overload(sig: Any, data: Any) -> None:
        try:
            save(sig, data)
        except Exception as exc:  # noqa: BLE001 - the kernel is compiled; the cache is optional
            _drop(name, cache_obj, exc, "save")
        _tighten(cache_obj)

    _private_writes(cache_obj)
    cache_obj.load_overload = load_overload
    cache_obj.save_overload = save_overload


@cache
def _sources_stamp() -> str:
    """:func:`kernels_stamp` once per process, for the kernels' cache entries."""
    return kernels_stamp()


def _stamp_with_sources(dispatcher: Any) -> None:
    """Keep the kernel's cache entries only while every kernel module is unchanged.

    Numba stamps a kernel's entries with its own module's size and
    modification time, but compiles the kernels it calls into it (inlined):
    a change to a kernel in another module (``routing.route_values`` under ``blocks``,
    ``ranks`` or ``top``) would leave the callers' entries fresh, and a
    process would load their old code.  The stamp also holds
    :func:`kernels_stamp` (every kernel module's size and modification
    time), so a change to any kernel module makes every entry stale, and
    each kernel is compiled again at its next use.
    """
    index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    own = getattr(index, "_source_stamp", None)
    if own is None:  # pragma: no cover - another numba's internals: its own stamp only
        return
    index._source_stamp = (own, _sources_stamp())


def kernel(func: Callable[..., Any]) -> Any:
    """``numba.njit(nogil=True, cache=True)``, cached in :func:`kernel_cache_dir`.

    Compiled without a cache when there is none (:func:`cache_choice`), or
    when Numba would keep the kernel outside the folder that was checked.
    """
    choice = cache_choice()
    compiled = None
    if choice.folder is not None and choice.tree is not None:
        # the real path (also for the user's NUMBA_CACHE_DIR): a link is never followed again
        with _numba_cache_dir(choice.folder):
            compiled = numba.njit(nogil=True, cache=True)(func)
        where = getattr(getattr(compiled, "_cache", None), "_cache_path", None)
        if isinstance(where, str) and Path(where).is_relative_to(choice.tree):
            _guard_cache(compiled)
            _stamp_with_sources(compiled)
        else:  # pragma: no cover - another numba's layout: never read an unchecked folder
            compiled = None
    if compiled is None:  # compile in every process rather than use an unsafe cache
        compiled = numba.njit(nogil=True, cache=False)(func)
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
    return {_kernel_name(k): sum(k.stats.cache_misses.values()) for k in kernels}


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
