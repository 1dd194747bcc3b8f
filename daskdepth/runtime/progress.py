"""Progress of a job's phases, named as :data:`daskdepth.runtime.keys.PHASES` names them.

:class:`PhaseProgress` listens to :func:`daskdepth.runtime.client.phase` and
shows each phase as it runs: a bar labelled with the phase (tasks counted by
a callback of dask's local schedulers, or in the distributed spans of the
phase), and/or a text line when a phase starts and ends, with its time.
Consecutive runs of one phase (the MCD concentration steps) form one entry,
whose passes are counted rather than shown again from zero.  The command line
(:class:`daskdepth.cli.progress.Progress`) and the estimators' ``verbose=``
(:func:`show_phases`) both use it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from dask.callbacks import Callback

from .client import active_client, listen_to_phases
from .keys import is_data_pass

#: Seconds between two redraws of a progress bar (and polls of the scheduler).
POLL_SECONDS = 0.2
#: Task states that count as done in a span.
DONE_STATES = ("memory", "released", "forgotten", "erred")
#: Kinds of bars: one line redrawn for the whole job, or one bar per phase left on screen.
BAR_KINDS = (None, "line", "each")
#: Kinds of text lines: one when a phase ends, or one when it starts and one when it ends.
LINE_KINDS = (None, "end", "both")


def progress_line(label: str, fraction: float | None, elapsed: float, width: int = 40,
                  tick: int = 0) -> str:
    """One redrawn line of a progress bar (starts with a carriage return, clears to the end).

    ``fraction`` None draws a block moving with ``tick``: work whose share done is
    not known (it runs on this machine, without tasks to count).

    Examples
    --------
    >>> progress_line("fitting: histogram", 0.5, 2.0, width=10)
    '\\r[#####     ] |  50% | fitting: histogram |   2.0s\\x1b[K'
    >>> progress_line("fitting: mcd-fastmcd", None, 2.0, width=10, tick=3)
    '\\r[   ##     ] |   ~  | fitting: mcd-fastmcd |   2.0s\\x1b[K'
    """
    if fraction is None:
        span = max(1, width // 4)
        pos = tick % (width - span + 1)
        bar = " " * pos + "#" * span
        share = "  ~ "
    else:
        bar = "#" * int(width * fraction)
        share = f"{int(100 * fraction):3d}%"
    return f"\r[{bar:<{width}}] | {share} | {label} | {elapsed:5.1f}s\33[K"


def clear_line(stream: TextIO | None = None) -> None:
    """Erase the progress bar's line (on ``stream``, default stderr)."""
    stream = sys.stderr if stream is None else stream
    stream.write("\33[2K\r")
    stream.flush()


def passes_text(counts: dict[str, int]) -> str:
    """How many passes over the data the phases ``counts`` (name: runs) made, and which.

    Only phases that read every row count (:func:`daskdepth.runtime.keys.is_data_pass`):
    the same passes the phase lines count.

    Examples
    --------
    >>> passes_text({"moments": 1, "mcd-fastmcd": 1, "cstep": 16, "reweight": 1})
    '18 passes over the data (moments 1, cstep 16, reweight 1)'
    >>> passes_text({"moments": 1, "exact": 1, "offset": 1})
    '1 pass over the data (moments 1)'
    """
    data = {name: k for name, k in counts.items() if is_data_pass(name)}
    total = sum(data.values())
    which = ", ".join(f"{name} {k}" for name, k in data.items())
    return f"{total} pass{'' if total == 1 else 'es'} over the data ({which})"


def runs_text(name: str, runs: int) -> str:
    """``, 3 passes over the data`` (or ``, 3 runs``) for a phase run ``runs`` times in a row.

    Examples
    --------
    >>> runs_text("cstep", 3), runs_text("pilot", 2), runs_text("cstep", 1)
    (', 3 passes over the data', ', 2 runs', '')
    """
    if runs <= 1:
        return ""
    return f", {runs} passes over the data" if is_data_pass(name) else f", {runs} runs"


def interactive(stream: Any) -> bool:
    """Whether a bar redrawn in place shows well on ``stream``: a terminal, or a notebook."""
    if type(stream).__module__.split(".")[0] == "ipykernel":  # Jupyter's streams redraw \r
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


class PhaseRun:
    """Consecutive passes of one phase: its name, spans, passes, start and end."""

    def __init__(self, name: str, now: float) -> None:
        self.name = name
        self.start = now
        self.end: float | None = None
        self.passes = 0
        self.span_ids: list[str] = []
        self.local = False  # work done here, without tasks
        self.running = True
        self.final: float | None = None  # share of tasks done when the last pass ended

    def seconds(self, now: float) -> float:
        """Time from the first pass's start to the last one's end (or to ``now``)."""
        return (now if self.running or self.end is None else self.end) - self.start


class TaskCounter(Callback):
    """Counts the tasks of the computations run by dask's local schedulers."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.done = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.total = self.done = 0

    def _start_state(self, dsk: Any, state: Any) -> None:
        with self._lock:  # the tasks still to run (literals are already in the cache)
            self.total += sum(len(state[k]) for k in ("ready", "waiting", "running"))

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        with self._lock:
            self.done += 1


class PhaseProgress:
    """Shows the phases run inside, as they run (see the module docstring).

    Parameters
    ----------
    label : str
        What the job is doing, e.g. ``"fitting AI-IRW"``; each phase shows as
        ``"<label>: <phase>"``.
    client : distributed.Client or None
        Task counts of a phase come from the scheduler's spans with a client,
        from a callback of the local schedulers otherwise.
    bars : {None, 'line', 'each'}, default=None
        ``'line'``: one bar redrawn in place for the whole job, labelled with
        the current phase and erased at the end (the command line on a
        terminal); ``'each'``: a bar per phase, left on screen with the phase's
        time when it ends.
    lines : {None, 'end', 'both'}, default=None
        Text lines: one per phase when it ends (``'end'``), or also one when it
        starts (``'both'``).
    stream : text stream, optional
        Where to write; default stderr (looked up at each write).
    prefix : str, default=''
        Put before each text line.

    Attributes
    ----------
    counts : dict of str to int
        How many times each phase ran, in the order they first ran (kept
        whatever is shown).

    Examples
    --------
    >>> import io, re, dask, dask.array as da
    >>> from daskdepth.runtime.client import phase
    >>> out = io.StringIO()
    >>> with dask.config.set(scheduler="sync"), PhaseProgress(
    ...         "fitting", None, lines="both", stream=out) as progress:
    ...     for _ in range(2):
    ...         with phase("cstep"):
    ...             _ = dask.compute(da.ones(4, chunks=2).sum())
    >>> print(re.sub(r"[0-9.]+ s", "T s", out.getvalue()), end="")
    fitting: cstep started
    fitting: cstep done in T s, 2 passes over the data
    >>> progress.counts
    {'cstep': 2}
    """

    def __init__(self, label: str, client: Any = None, *, bars: str | None = None,
                 lines: str | None = None, stream: TextIO | None = None,
                 prefix: str = "") -> None:
        if bars not in BAR_KINDS or lines not in LINE_KINDS:
            raise ValueError(f"bars must be one of {BAR_KINDS} and lines one of {LINE_KINDS}; "
                             f"got {bars!r} and {lines!r}")
        self.label = label
        self.client = client
        self.bars = bars
        self.lines = lines
        self._stream = stream
        self.prefix = prefix
        self.start = time.monotonic()
        self.run: PhaseRun | None = None
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        # Re-entrant: a phase's switch holds it while it finishes the previous phase's bar,
        # so that the drawing thread never draws between the two.
        self._draw_lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counter = TaskCounter() if client is None else None
        self._stack = contextlib.ExitStack()
        self._tick = 0

    @property
    def stream(self) -> TextIO:
        return sys.stderr if self._stream is None else self._stream

    @property
    def elapsed(self) -> float:
        """Seconds since the progress started."""
        return time.monotonic() - self.start

    # ---------------------------------------------------------------- phases

    def _on_phase(self, name: str, started: bool, span_id: str | None) -> None:
        with self._draw_lock:
            self._switch(name, started, span_id, time.monotonic())

    def _switch(self, name: str, started: bool, span_id: str | None, now: float) -> None:
        with self._lock:
            if not started:
                if self.run is not None and self.run.name == name:
                    if self._counter is not None:  # kept: the next phase resets the counter
                        self.run.final = self._fraction(self.run)
                    self.run.running = False
                    self.run.end = now
                return
            self.counts[name] = self.counts.get(name, 0) + 1
            previous = None
            if self.run is None or self.run.name != name:
                previous = self.run
                self.run = PhaseRun(name, now)
                if self._counter is not None:
                    self._counter.reset()
            run = self.run
            run.passes += 1
            run.running = True
            run.local = span_id is None
            if span_id is not None:
                run.span_ids.append(span_id)
        if previous is not None:
            self._finish(previous, now)
        if run.passes == 1 and self.lines == "both":
            self._line(f"{self.label}: {name} started")
        if self._thread is not None:  # show each phase at once, however short
            self._draw()

    def _finish(self, run: PhaseRun, now: float) -> None:
        """What is shown when a phase is over (the next one started, or the job ended)."""
        if self.bars == "each":
            with self._draw_lock:
                self._draw_run(run, now)
                self.stream.write("\n")
                self.stream.flush()
        if self.lines is not None:
            self._line(f"{self.label}: {run.name} done in {run.seconds(now):.1f} s"
                       f"{runs_text(run.name, run.passes)}")

    def _line(self, text: str) -> None:
        print(f"{self.prefix}{text}", file=self.stream, flush=True)

    # ---------------------------------------------------------------- drawing

    def _fraction(self, run: PhaseRun) -> float | None:
        if run.local:
            return None
        if not run.running and run.final is not None:
            return run.final
        if self._counter is not None:
            total, done = self._counter.total, self._counter.done
        else:
            total, done = self._span_counts(list(run.span_ids))
        return min(1.0, done / total) if total else 0.0

    def _span_counts(self, span_ids: list[str]) -> tuple[int, int]:
        """Tasks in all and done in the spans ``span_ids`` (asked of the scheduler)."""
        done_states = DONE_STATES

        # Nested, so that cloudpickle sends it by value: the scheduler need not
        # have daskdepth installed.
        def counts(dask_scheduler: Any = None) -> tuple[int, int]:
            ext = dask_scheduler.extensions.get("spans")
            total = done = 0
            for sid in span_ids:
                sp = ext.spans.get(sid) if ext is not None else None
                if sp is not None:
                    states = sp.states
                    total += sum(states.values())
                    done += sum(states.get(k, 0) for k in done_states)
            return total, done

        try:
            total, done = self.client.run_on_scheduler(counts)
        except Exception:  # the scheduler went away: the job reports it
            return 0, 0
        return int(total), int(done)

    def _draw(self) -> None:
        with self._draw_lock:
            with self._lock:
                run = self.run
            if run is None:
                if self.bars == "line":
                    self.stream.write(progress_line(self.label, 0.0, self.elapsed))
                    self.stream.flush()
            else:
                self._draw_run(run, time.monotonic())

    def _draw_run(self, run: PhaseRun, now: float) -> None:
        passes = f" (pass {run.passes})" if run.passes > 1 else ""
        where = " (on this machine)" if run.local else ""
        fraction = self._fraction(run)
        self._tick += 1
        # One bar for the job shows the job's time; a bar per phase, the phase's.
        seconds = now - self.start if self.bars == "line" else run.seconds(now)
        self.stream.write(progress_line(f"{self.label}: {run.name}{passes}{where}", fraction,
                                        seconds, tick=self._tick))
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._draw()

    # ---------------------------------------------------------------- context

    def __enter__(self) -> PhaseProgress:
        self._stack.enter_context(listen_to_phases(self._on_phase))
        if self._counter is not None:
            self._stack.enter_context(self._counter)
        if self.bars is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._stack.close()
        with self._lock:
            run, self.run = self.run, None
        if self.bars == "line":
            clear_line(self.stream)
        if run is not None and (exc_type is None or self.bars == "each"):
            self._finish(run, time.monotonic())


@contextlib.contextmanager
def show_phases(label: str, verbose: int, stream: TextIO | None = None
                ) -> Iterator[PhaseProgress | None]:
    """The progress of ``verbose=``: nothing for 0; otherwise each phase named as it runs.

    With dask's local schedulers and a terminal or notebook, a bar per phase
    labelled ``"<label>: <phase>"`` that stays with the phase's time when it
    ends; otherwise (a distributed client, or output to a file) a line when
    each phase starts and one when it ends, with its time.  A last line gives
    the total time and the passes over the data.  ``stream`` defaults to
    stdout, as scikit-learn's ``verbose``.

    Examples
    --------
    >>> import io, re, dask, dask.array as da
    >>> from daskdepth.runtime.client import phase
    >>> out = io.StringIO()
    >>> with dask.config.set(scheduler="sync"), show_phases("fitting", 1, out):
    ...     with phase("moments"):
    ...         _ = dask.compute(da.ones(4, chunks=2).sum())
    >>> print(re.sub(r"[0-9.]+ s", "T s", out.getvalue()), end="")
    fitting: moments started
    fitting: moments done in T s
    fitting: done in T s, 1 pass over the data (moments 1)
    """
    if not verbose:
        yield None
        return
    out = sys.stdout if stream is None else stream
    bars = "each" if active_client() is None and interactive(out) else None
    with PhaseProgress(label, None, bars=bars, lines=None if bars else "both",
                       stream=out) as progress:
        yield progress
    print(f"{label}: done in {progress.elapsed:.1f} s, {passes_text(progress.counts)}",
          file=out, flush=True)
