"""What the command line prints: status lines, results, warnings, errors.

Status lines, warnings, errors and progress go to stderr; results to stdout,
so that ``daskdepth info --json`` can be piped.  Standard library only (the
progress bars, which need Dask, are drawn by :mod:`daskdepth.runtime.progress`).
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any


class CommandUsageError(ValueError):
    """A usage error found once a job has read its MODEL: an option or a command that does
    not apply to the saved model's depth (exit status 2, as the parser's usage errors)."""


class ModelBusyError(OSError):
    """``update``: another job holds the model (exit status 3; nothing was changed)."""


#: Exceptions whose message says it all: reported without their class name or a hint.
PLAIN_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, KeyError, TypeError)


class UI:
    """Status lines and results, silenced by ``--quiet``; progress only on a terminal."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        stream = sys.stderr
        self.progress = not quiet and hasattr(stream, "isatty") and stream.isatty()

    def status(self, message: str) -> None:
        """A line about what the job is doing (stderr)."""
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)

    def result(self, message: str) -> None:
        """The line that says what the job produced (stdout)."""
        if not self.quiet:
            print(message, flush=True)


def printable(text: str) -> str:
    r"""``text`` with control and formatting characters escaped, for a terminal.

    Values read from stores (attributes, names, paths) are untrusted: escape
    sequences could rewrite the screen, and newlines or bidirectional controls
    could fake lines.

    Examples
    --------
    >>> print(printable("ok\x1b[2J\nfake line\u202e é"))
    ok\x1b[2J\nfake line\u202e é
    """
    out = []
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(repr(ch)[1:-1] if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def format_warning(message: Any, category: type, filename: str, lineno: int,
                   file: Any = None, line: Any = None) -> None:
    """A :func:`warnings.showwarning` that prints the first line of a warning, no source."""
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"daskdepth: warning: {text}", file=sys.stderr, flush=True)


def _is_closed_comm(exc: BaseException) -> bool:
    """Whether ``exc`` is distributed's ``CommClosedError`` (without importing distributed)."""
    return any(c.__name__ == "CommClosedError" and c.__module__.startswith("distributed.")
               for c in type(exc).__mro__)


def error_lines(exc: BaseException) -> list[str]:
    """The one or two lines that report a failed job.

    Examples
    --------
    >>> error_lines(ValueError("input has 2 rows with NaN; pass nan_policy='omit'"))
    ['daskdepth: error: input has 2 rows with NaN; pass --nan-policy omit']
    >>> error_lines(OSError("output 'o.zarr' already exists; pass overwrite=True to "
    ...                     "replace it"))
    ["daskdepth: error: output 'o.zarr' already exists; pass --overwrite to replace it"]
    >>> error_lines(RuntimeError("boom"))
    ['daskdepth: error: RuntimeError: boom', '(run with --debug for the traceback)']
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    # distributed says it in one of two ways, depending on which call met the closed
    # connection first: a cancelled future, or the closed stream itself (an OSError)
    if "scheduler-connection-lost" in text or _is_closed_comm(exc):
        return ["daskdepth: error: the connection to the Dask scheduler was lost during the "
                "job (did the scheduler stop?); nothing was written"]
    text = text.replace("pass nan_policy='omit'", "pass --nan-policy omit")
    # the storage layer speaks Python ("overwrite=True"): here, the flag
    text = text.replace("overwrite=True", "--overwrite")
    if isinstance(exc, PLAIN_ERRORS):
        return [f"daskdepth: error: {text}"]
    return [f"daskdepth: error: {type(exc).__name__}: {text}",
            "(run with --debug for the traceback)"]
