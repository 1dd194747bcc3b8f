"""Shared by the benchmark scripts: the machine header and the tables in benchmarks/README.md.

A script run with ``--markdown`` writes its table into ``benchmarks/README.md`` between the
markers ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``, after a header that says how it was
produced (:func:`header`).  Nothing else of the file changes.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

README = Path(__file__).resolve().parent / "README.md"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def blas() -> str:
    """Which BLAS NumPy uses and with how many threads (threadpoolctl when installed)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "BLAS unknown (threadpoolctl not installed)"
    import numpy  # noqa: F401  (loads NumPy's BLAS so that threadpoolctl sees it)

    pools = [f"{p.get('internal_api')} {p.get('version') or ''}".strip()
             + f", {p.get('num_threads')} threads"
             for p in threadpool_info() if p.get("user_api") == "blas"]
    return "; ".join(pools) or "no BLAS found"


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def header(loads: Sequence[float], runs: int | None,
           argv: Sequence[str] | None = None) -> str:
    """The lines above a table: command, date, machine, load average during the runs.

    ``loads`` are 1-minute load averages sampled during the runs; ``runs`` how many runs each
    cell of the table summarises (``None`` for a table of results that do not depend on
    timing: one run gives them).
    """
    argv = list(sys.argv if argv is None else argv)
    script = os.path.relpath(Path(argv[0]).resolve(), README.parent.parent)
    command = "python " + " ".join(shlex.quote(a) for a in [script, *argv[1:]])
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return (f"```bash\n{command}\n```\n\n"
            f"{today}; {os.cpu_count()} cores, {cpu_model()}; {blas()}; load average (1 min) "
            f"{min(loads):.1f}-{max(loads):.1f} during the runs"
            + (f"; median [min-max] of {runs} runs.\n" if runs else ".\n"))


def stats(values: Sequence[float], digits: int = 2) -> str:
    """``median [min-max]`` of ``values``.

    >>> stats([1.0, 3.0, 2.0])
    '2.00 [1.00-3.00]'
    """
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}-{max(values):.{digits}f}]")


def replace_section(name: str, text: str, path: Path = README) -> None:
    """Put ``text`` between the ``name`` markers of ``path``, replacing what was there.

    The markers must already be in the file (each exactly once), so that a table's place in
    the page is chosen by whoever writes the page, not by the script.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    page = path.read_text()
    if page.count(start) != 1 or page.count(end) != 1 or page.index(start) > page.index(end):
        raise SystemExit(f"{path} needs the markers {start} and {end} once each, in this "
                         f"order: add them where the table belongs")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
    path.write_text(pattern.sub(lambda _: f"{start}\n{text.strip()}\n{end}", page))


def check_runs(runs: int, markdown: bool) -> None:
    """A table written to the README summarises at least 5 runs."""
    if markdown and runs < 5:
        raise SystemExit(f"--markdown needs --repeat 5 or more (got {runs}): the page gives "
                         f"median [min-max] of at least 5 runs")
