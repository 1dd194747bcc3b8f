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

When that directory cannot be created or written, kernels are compiled in every
process instead (no cache), rather than written into the package.  The choice is
made per kernel when its module is imported, by setting ``numba.config.CACHE_DIR``
only while the kernel is decorated (Numba reads it there and keeps the path), so
the user's own Numba functions and settings are untouched.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numba
from numba.core import config as numba_config

#: Environment variable naming daskdepth's cache directory (kernels in its ``numba`` folder).
CACHE_ENV = "DASKDEPTH_CACHE_DIR"

_lock = threading.Lock()
#: Every kernel made by :func:`kernel`, for :func:`kernels_cached`.
_KERNELS: list[Any] = []


def user_cache_root() -> Path:
    """The platform's per-user cache directory for daskdepth (not created here).

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


def kernel_cache_dir() -> Path | None:
    """Where daskdepth's compiled kernels are cached; None: Numba's own ``NUMBA_CACHE_DIR``.

    Examples
    --------
    >>> import os
    >>> path = kernel_cache_dir()
    >>> path is None or path.name == "numba"
    True
    """
    explicit = os.environ.get(CACHE_ENV, "")
    if explicit:
        return Path(explicit).expanduser() / "numba"
    if numba_config.CACHE_DIR:
        return None
    return user_cache_root() / "numba"


@cache
def _writable(path: Path) -> bool:
    """Whether ``path`` can be created and written (checked once per process)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


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


def kernel(func: Callable[..., Any]) -> Any:
    """``numba.njit(nogil=True, cache=True)``, cached in :func:`kernel_cache_dir`."""
    target = kernel_cache_dir()
    if target is None:  # the user's NUMBA_CACHE_DIR
        compiled = numba.njit(nogil=True, cache=True)(func)
    elif not _writable(target):  # compile in every process rather than write into the package
        compiled = numba.njit(nogil=True, cache=False)(func)
    else:
        with _numba_cache_dir(target):
            compiled = numba.njit(nogil=True, cache=True)(func)
    _KERNELS.append(compiled)
    return compiled


def kernels_cached(share: float = 0.5) -> bool:
    """Whether at least ``share`` of the kernels imported so far have compiled code on disk.

    When not, the next job compiles them first (about 20 s on a laptop), which
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
