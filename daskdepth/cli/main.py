"""``main``: parse the command line, run the job, turn its outcome into an exit status.

Exit status: 0 on success, 2 for usage errors (bad options, an input, model or
``--array`` that does not exist, an output that exists without ``--overwrite``, an output
that is the input, an option or command that does not apply to the saved model's depth),
1 when the job fails (an unreadable or unusable input, NaN/inf rows, a corrupted model,
...), 3 when ``update`` finds its model held by another update (it waits ``--wait``
seconds first), 130 on
Ctrl-C and 143 on SIGTERM, 141 when the reader of stdout went away
(``daskdepth info --json ... | head``).  A job that fails or is stopped
removes its temporary once no task of it can still write there; when the
workers of a remote cluster cannot be confirmed stopped (its scheduler is
gone), the temporary is left in place, leased, with a warning, and a later job
removes it.  Errors are reported in one or two lines; ``--debug`` shows the
traceback and the logs of distributed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from ..errors import MissingInputError, OutputError
from .parser import parse_command_line, version_text
from .ui import UI, CommandUsageError, ModelBusyError, error_lines, format_warning

#: A command: runs the job of the parsed options and returns the exit status.
Command = Callable[[argparse.Namespace, UI, Sequence[str]], int]

#: Exit statuses.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: Exit status of an ``update`` whose model another job holds (nothing was changed).
EXIT_BUSY = 3
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
#: Exit status when the reader of stdout went away (128 + SIGPIPE, as other programs).
EXIT_BROKEN_PIPE = 141


class _Terminated(BaseException):
    """SIGTERM received: unwind so that temporaries are removed."""


def _raise_on_sigterm() -> Callable[[], Any]:
    """Turn SIGTERM into an exception (in the main thread); return the undo function.

    Only the first SIGTERM raises: the job is then unwinding, and a second one
    must not interrupt the removal of its temporaries.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    fired = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise _Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - unusual platforms
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, old)


def _remove_pending() -> None:
    """Remove the temporaries of a job ended by a signal (see ``storage.atomic.remove_pending``).

    Looked up in ``sys.modules`` rather than imported: a job that made a
    temporary has loaded that module, and importing it (with xarray) for
    nothing would slow the exit of every other interrupted command.
    """
    atomic = sys.modules.get("daskdepth.storage.atomic")
    if atomic is not None:
        atomic.remove_pending()


def _terminate() -> NoReturn:
    """End the process at once with :data:`EXIT_TERMINATED`, after the job's cleanup.

    The job has unwound (its temporaries removed, its cluster closed); waiting at
    interpreter exit for task threads still busy (a kernel being compiled, a
    task of the interrupted pass) could take minutes, which a process asked to
    terminate must not.
    """
    _remove_pending()
    print("daskdepth: terminated", file=sys.stderr)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(EXIT_TERMINATED)


def _command(name: str) -> Command:
    """The function that runs the command ``name``."""
    # deferred: the jobs import Dask, which --help and usage errors never need
    from . import demo, jobs

    commands: dict[str, Command] = {"score": jobs.cmd_score, "fit": jobs.cmd_fit,
                                    "apply": jobs.cmd_apply, "info": jobs.cmd_info,
                                    "drift": jobs.cmd_drift, "update": jobs.cmd_update,
                                    "demo": demo.cmd_demo}
    return commands[name]


@contextlib.contextmanager
def _job_environment(debug: bool) -> Iterator[None]:
    """SIGTERM as an exception, one-line warnings, and log records kept off the terminal.

    A failed job is reported once, in one line (:func:`_report`); distributed
    logs the same failure on its own loggers, some with their own levels
    (``distributed.client``), e.g. about 35 lines of tracebacks when the
    scheduler goes away, so every log record is held back during the job
    unless ``--debug`` asks for them.
    """
    restore_sigterm = _raise_on_sigterm()
    disabled = logging.root.manager.disable
    if not debug:
        logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = format_warning
            warnings.filterwarnings("ignore", module="distributed")
            yield
    finally:
        logging.disable(disabled)
        restore_sigterm()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush raises nothing."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _report(exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    for line in error_lines(exc):
        print(line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``daskdepth`` command line; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 1 when the job failed, 2 for a usage error, 3 when ``update``
        finds its model held by another job.

    Examples
    --------
    >>> main(["--version"])  # doctest: +ELLIPSIS
    daskdepth ...
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:  # what the parser would print, without loading Dask
        print(version_text())
        return EXIT_OK
    try:
        args = parse_command_line(argv)
    except SystemExit as exc:  # --help and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    ui = UI(quiet=getattr(args, "quiet", False))
    try:
        with _job_environment(args.debug):
            return int(_command(args.command)(args, ui, argv))
    except BrokenPipeError:  # e.g. `daskdepth info --json ... | head`: the reader is gone
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (OutputError, MissingInputError, CommandUsageError) as exc:
        _report(exc, args.debug)
        return EXIT_USAGE
    except ModelBusyError as exc:
        _report(exc, args.debug)
        return EXIT_BUSY
    except KeyboardInterrupt:
        _remove_pending()
        print("daskdepth: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated:
        _terminate()
    except Exception as exc:
        _report(exc, args.debug)
        return EXIT_FAILED
