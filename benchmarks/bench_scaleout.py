"""Scale-out: bytes moved between workers, tasks and wall time per phase of a fit and a scoring.

Starts a ``LocalCluster`` of ``--workers`` single-threaded worker processes,
persists ``n x d`` Gaussian rows on it (chunks of ``--chunk`` rows, drawn on
the workers), fits ``IRW`` with the defaults (``m = 100 d``, ``tol = 1e-4``)
and scores every row, and records for every phase of the fit (its
``distributed.span`` hooks) and for the scoring:

- bytes moved between workers: the sum over the workers of their
  ``transfer_incoming_log`` totals (its length is raised so nothing is dropped);
  the client's own scatters and gathers are not in it;
- the scheduler's transitions (each task makes a few: waiting, processing,
  memory, released, forgotten) and the tasks that ran;
- wall time.

The fit's data passes (moments, histogram waves, refinement) are also
reported per pass: the transitions and tasks of those phases divided by
their number.  With a sharded summary, the replica width ``k`` (workers per
replica group, :func:`daskdepth.runtime.replicas.replica_width`) and the
number of groups are recorded.

Usage::

    python benchmarks/bench_scaleout.py --workers 2 4 8 --rows 1e6 --features 5 --repeat 5 \
        --json scaleout.jsonl
    python benchmarks/bench_scaleout.py --workers 2 4 8 --rows 2e5 --features 40 \
        --memory-limit 4GiB --repeat 5 --json scaleout.jsonl   # the summary is sharded
    python benchmarks/bench_scaleout.py --json scaleout.jsonl --markdown --no-run
        # the tables (min / median / max over the runs) into benchmarks/README.md

Each run is a fresh cluster; ``--repeat`` runs each configuration again.
With ``--markdown`` the runs (those of ``--json`` if given, else this call's)
are summarised per configuration and written into the scale-out section of
``benchmarks/README.md`` (between its markers), with the machine: CPU,
cores, load average, date.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from typing import Any

import numpy as np


def _incoming(dask_worker: Any) -> int:
    return int(sum(e["total"] for e in dask_worker.transfer_incoming_log))


def _scheduler_counts(dask_scheduler: Any) -> dict[str, int]:
    # tasks that ran: processing -> memory (or -> erred) transitions so far
    ran = sum(1 for t in dask_scheduler.transition_log
              if t[1] == "processing" and t[2] in ("memory", "erred"))
    return {"transitions": int(dask_scheduler.transition_counter), "tasks": ran}


class Meter:
    """Bytes, transitions and time between successive marks, filed under a label."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.rows: list[dict[str, Any]] = []
        self._last = self._read()

    def _read(self) -> dict[str, float]:
        moved = sum(self.client.run(_incoming).values())
        counts = self.client.run_on_scheduler(_scheduler_counts)
        return {"bytes": moved, "time": time.perf_counter(), **counts}

    def mark(self, label: str) -> None:
        now = self._read()
        self.rows.append({"phase": label, **{k: now[k] - self._last[k] for k in now}})
        self._last = now


def machine() -> dict[str, Any]:
    """CPU model, cores, load averages (1, 5, 15 min) and the time, for the record."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(),
            "load": [round(v, 2) for v in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def run(n: int, d: int, workers: int, memory_limit: str, chunk: int,
        tol: float) -> dict[str, Any]:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import daskdepth
    from daskdepth.runtime.client import listen_to_phases
    from daskdepth.runtime.keys import is_data_pass
    from daskdepth.runtime.replicas import replica_width

    before = machine()
    with dask.config.set({"distributed.admin.low-level-log-length": 10**7}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         memory_limit=memory_limit, dashboard_address=":0") as lc, \
            Client(lc) as client:
        x = da.random.RandomState(0).standard_normal((n, d), chunks=(chunk, d)).persist()
        wait(x)
        meter = Meter(client)
        runs: dict[str, int] = {}

        def hook(name: str, started: bool, _span: str | None) -> None:
            if started:
                runs[name] = runs.get(name, 0) + 1
            meter.mark("between phases" if started else name)

        widths = PassWidths()  # the sharded passes' replica widths, as the fit logs them
        t0 = time.perf_counter()
        with listen_to_phases(hook), widths:
            model = daskdepth.IRW(tol=tol, random_state=0).fit(x)
        meter.mark("between phases")
        fit_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        depth = model.score_samples(x).compute()
        meter.mark("score")
        score_s = time.perf_counter() - t1
        sharded = any(hasattr(b, "future") for b in model.summary_.blocks)
        summary_bytes = int(model.summary_.nbytes)
        width = replica_width(summary_bytes, workers) if sharded else 1
        passes = int(model.n_passes_)
    phases: dict[str, dict[str, float]] = {}
    for r in meter.rows:
        p = phases.setdefault(r["phase"], {"bytes": 0, "transitions": 0, "tasks": 0, "time": 0})
        for k in ("bytes", "transitions", "tasks", "time"):
            p[k] += r[k]
    fit = {k: sum(v[k] for ph, v in phases.items() if ph != "score")
           for k in ("bytes", "transitions", "tasks")}
    data_passes = {ph: runs.get(ph, 0) for ph in phases
                   if ph not in ("score", "between phases") and is_data_pass(ph)}
    count = max(1, sum(data_passes.values()))
    per_pass = {k: sum(phases[ph][k] for ph in data_passes) / count
                for k in ("transitions", "tasks", "bytes")}
    return {
        "rows": n, "features": d, "workers": workers, "memory_limit": memory_limit,
        "chunk": chunk, "chunks": -(-n // chunk), "n_directions": 100 * d, "tol": tol,
        "data_bytes": n * d * 8, "summary_bytes": summary_bytes, "sharded": sharded,
        "width": width, "groups": max(1, workers // width),
        "fit_widths": widths.widths,
        "passes": passes, "data_passes": data_passes, "fit_s": round(fit_s, 2),
        "score_s": round(score_s, 2), "fit": fit, "per_pass": per_pass,
        "score": phases.get("score", {}),
        "phases": {ph: {k: (round(v, 2) if k == "time" else int(v)) for k, v in p.items()}
                   for ph, p in phases.items()},
        "depth_finite": bool(np.isfinite(depth).all()),
        "machine": before, "load_after": machine()["load"],
    }


class PassWidths(logging.Handler):
    """While entered: the ``k`` of each sharded fit pass, as the fit logs it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.widths: list[int] = []
        self.logger = logging.getLogger("daskdepth.fitting.summaries")

    def emit(self, record: logging.LogRecord) -> None:
        if "groups of k" in record.msg:
            self.widths.append(int(record.args[-2]))

    def __enter__(self) -> PassWidths:
        self.level = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level)


HEADER = ("| workers | summary (k x groups) | runs | fit: moved (x data) | fit: tasks | "
          "per data pass: tasks / transitions | fit (s) min / med / max | "
          "score: moved (x data) | score: tasks / transitions | score (s) min / med / max |\n"
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def _mib(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB"


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``a`` if all equal, else ``min - max`` (bytes and counts vary a little between runs)."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else \
        f"{fmt.format(lo)} - {fmt.format(hi)}"


def _times(values: list[float]) -> str:
    v = sorted(values)
    return f"{v[0]:.1f} / {float(np.median(v)):.1f} / {v[-1]:.1f}"


def table_row(rs: list[dict[str, Any]]) -> str:
    """One configuration's runs: bytes and counts as ranges, times as min / median / max."""
    r = rs[0]
    data = r["data_bytes"]
    kind = (f"sharded, k = {r['width']} x {r['groups']}" if r["sharded"] else "copied")
    widths = sorted({w for x in rs for w in x.get("fit_widths", [])})
    if widths:  # the fit's sharded passes: k = W is the pass over all workers
        kind += f"; fit passes k = {', '.join(map(str, widths))}"
    fit_b = [x["fit"]["bytes"] for x in rs]
    score_b = [x["score"].get("bytes", 0) for x in rs]
    return (f"| {r['workers']} | {_mib(r['summary_bytes'])} {kind} | {len(rs)} | "
            f"{_spread([b / 2**20 for b in fit_b], '{:,.0f}')} MiB "
            f"({_spread([b / data for b in fit_b], '{:.2f}')}x) | "
            f"{_spread([x['fit']['tasks'] for x in rs])} | "
            f"{_spread([x['per_pass']['tasks'] for x in rs])} / "
            f"{_spread([x['per_pass']['transitions'] for x in rs])} | "
            f"{_times([x['fit_s'] for x in rs])} | "
            f"{_spread([b / 2**20 for b in score_b], '{:,.0f}')} MiB "
            f"({_spread([b / data for b in score_b], '{:.2f}')}x) | "
            f"{_spread([x['score'].get('tasks', 0) for x in rs])} / "
            f"{_spread([x['score'].get('transitions', 0) for x in rs])} | "
            f"{_times([x['score_s'] for x in rs])} |")


def tables(results: list[dict[str, Any]]) -> str:
    """Markdown tables, one per data shape and memory limit, one row per worker count."""
    setups: dict[tuple, dict[int, list[dict[str, Any]]]] = {}
    for r in results:
        key = (r["rows"], r["features"], r["memory_limit"], r["chunk"], r["tol"])
        setups.setdefault(key, {}).setdefault(r["workers"], []).append(r)
    out = []
    for (n, d, limit, chunk, tol), by_workers in setups.items():
        every = [r for rs in by_workers.values() for r in rs]
        loads = [r["machine"]["load"][0] for r in every] + [r["load_after"][0] for r in every]
        m = every[0]["machine"]
        dates = sorted(r["machine"]["date"] for r in every)
        out.append(
            f"**{n:,} x {d}** ({_mib(n * d * 8)}), chunks of {chunk:,} rows, {limit} workers "
            f"(single-threaded processes), m = {100 * d:,}, tol = {tol:g}; "
            f"{m['cpu']}, {m['cores']} cores, load average (1 min) {min(loads):.1f} - "
            f"{max(loads):.1f} during the runs, {dates[0]} - {dates[-1][11:]}\n\n{HEADER}")
        out.extend(table_row(by_workers[w]) for w in sorted(by_workers))
        out.append("")
    return "\n".join(out)


def task_cost(workers: int, tasks: int) -> dict[str, Any]:
    """Wall seconds per task and per transition of ``tasks`` tiny tasks (scheduler-bound).

    The tasks do nothing (each returns its index) and are summed in a tree, so
    the time is the scheduler's and the workers' bookkeeping, the per-task
    cost that the scale model multiplies by the tasks of a pass.
    """
    import dask
    from dask.delayed import delayed
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.admin.low-level-log-length": 10**7}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         dashboard_address=":0") as lc, Client(lc) as client:
        parts = [delayed(int, pure=True)(i, dask_key_name=("tiny", i)) for i in range(tasks)]
        while len(parts) > 1:
            parts = [delayed(sum, pure=True)(parts[i:i + 8]) for i in range(0, len(parts), 8)]
        before = client.run_on_scheduler(_scheduler_counts)
        t0, cpu0 = time.perf_counter(), time.process_time()
        assert dask.compute(parts[0])[0] == tasks * (tasks - 1) // 2
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        after = client.run_on_scheduler(_scheduler_counts)
    ran = after["tasks"] - before["tasks"]
    moves = after["transitions"] - before["transitions"]
    # The scheduler runs in this process (with the client): its CPU time is not
    # stretched by other processes' load as the wall time is.
    return {"workers": workers, "tasks": ran, "transitions": moves, "seconds": round(seconds, 2),
            "per_task_ms": round(1e3 * seconds / ran, 3),
            "cpu_per_task_ms": round(1e3 * cpu / ran, 3), "machine": machine()}


def kernel_cost(n: int, d: int, tol: float) -> dict[str, Any]:
    """CPU seconds per row and direction of a histogram pass and of scoring (one thread).

    A fit and a scoring under the synchronous scheduler, timed with this
    process's CPU clock (not stretched by other processes' load): the per-row
    costs the scale model divides over the workers' threads.
    """
    import dask
    import dask.array as da

    import daskdepth
    from daskdepth.runtime.client import listen_to_phases

    cpu: dict[str, float] = {}
    start: dict[str, float] = {}

    def hook(name: str, started: bool, _span: str | None) -> None:
        if started:
            start[name] = time.process_time()
        else:
            cpu[name] = cpu.get(name, 0.0) + time.process_time() - start[name]

    x = da.random.RandomState(0).standard_normal((n, d), chunks=(25_000, d)).persist(
        scheduler="sync")
    with dask.config.set(scheduler="sync"), listen_to_phases(hook):
        model = daskdepth.IRW(tol=tol, random_state=0).fit(x)
        t0 = time.process_time()
        model.score_samples(x + 0.0).compute()  # not the training rows' known depths
        cpu["score"] = time.process_time() - t0
    m = 100 * d
    return {"rows": n, "features": d, "directions": m, "cpu_s": {k: round(v, 2) for k, v in
                                                                cpu.items()},
            "histogram_s_per_row_direction": cpu.get("histogram", 0.0) / (n * m),
            "score_s_per_row_direction": cpu["score"] / (n * m), "machine": machine()}


START, END = "<!-- scaleout:start -->", "<!-- scaleout:end -->"

INTRO = """## Scale-out: bytes, tasks and time per pass (`bench_scaleout.py`)

Bytes moved between workers (the sum of the workers' `transfer_incoming_log`), tasks and the
scheduler's transitions, and wall time, for a fit (IRW defaults) and a scoring of every row, on a
`LocalCluster` of single-threaded worker processes, data persisted first (drawn on the workers).
Times are min / median / max over the runs; bytes and counts vary a little between runs
(ranges). A summary is copied to every worker (k = 1) when it is under a sixteenth of a worker's
memory limit, otherwise sharded over replica groups of k workers (see `docs/scaleout.md`).
"Per data pass" is the fit's moments, histogram and refinement phases divided by their number.
Written by `python benchmarks/bench_scaleout.py --json FILE --markdown --no-run`.
"""


def write_section(path: str, body: str) -> None:
    """Replace the scale-out section of ``path`` (between its markers), or add it."""
    section = f"{START}\n{INTRO}\n{body}{END}"
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Benchmarks\n\n"
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, nargs="+", default=[1e6])
    p.add_argument("--features", type=int, default=5)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--memory-limit", default="4GiB")
    p.add_argument("--chunk", type=int, default=25_000, help="rows per chunk")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", help="append each result as one JSON line to this file")
    p.add_argument("--markdown", action="store_true",
                   help="write the tables into benchmarks/README.md's scale-out section")
    p.add_argument("--readme", default=os.path.join(os.path.dirname(__file__), "README.md"))
    p.add_argument("--no-run", action="store_true", help="only --markdown, from --json")
    p.add_argument("--kernel-cost", action="store_true",
                   help="only measure the CPU time per row and direction (--rows, --features)")
    p.add_argument("--task-cost", type=int, metavar="TASKS",
                   help="only measure the time per task of TASKS tiny tasks on --workers")
    args = p.parse_args(argv)
    if args.kernel_cost:
        print(json.dumps(kernel_cost(int(args.rows[0]), args.features, args.tol)), flush=True)
        return 0
    if args.task_cost:
        for w in args.workers:
            print(json.dumps(task_cost(w, args.task_cost)), flush=True)
        return 0
    results: list[dict[str, Any]] = []
    for _ in range(0 if args.no_run else args.repeat):
        for rows in args.rows:
            for w in args.workers:
                r = run(int(rows), args.features, w, args.memory_limit, args.chunk, args.tol)
                results.append(r)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
                print(json.dumps(r), flush=True)
    if args.markdown:
        if args.json and os.path.exists(args.json):
            with open(args.json) as f:
                results = [json.loads(line) for line in f if line.strip()]
        body = tables(results)
        write_section(args.readme, body)
        print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
