"""Where a fit's CPU time goes: AI-IRW on Http and on Gaussian rows, phase by phase.

Times the fit and the scoring of every row in process CPU time (``time.process_time``: on
a machine shared with other work it counts this process's own cycles, where wall time
counts the others' too), on the local synchronous scheduler so that each phase is one
thread's work: the moments pass, covariance and directions (``frame``), the pilot
(projections of the row sample, sorted and cut), the histogram pass (with finishing the
leaves), the refinement pass (when one runs), the offset's sample depths, and the rest.
Gives CPU time per row-direction (``n x m``) of the fit and the ratio of fit to scoring.
The data sets are run in turns, ``--repeat`` times, so that load changes hit each alike.
Usage::

    python benchmarks/bench_fit.py [--data PATH] [--rows 1000000] [--repeat 5] [--markdown]

``--markdown`` writes the table into benchmarks/README.md (section ``fit``).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from report import check_runs, header, replace_section, stats

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "odds" / "http.npz"

#: (module, function) timed as a phase; nested phases are not double counted.
PHASES = {
    "frame": ("daskdepth.fitting.fit", "fit_frame"),
    "pilot": ("daskdepth.fitting.summaries", "pilot_phase"),
    "histogram": ("daskdepth.fitting.summaries", "histogram_phase"),
    "refine": ("daskdepth.fitting.summaries", "refine_phase"),
    "offset": ("daskdepth.fitting.fit", "offset_depths"),
}


def _timed(spent: dict[str, float]) -> None:
    """Wrap each phase's function so that its CPU time adds to ``spent``."""
    import importlib

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            c = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - c
        return timed

    for name, (module, attr) in PHASES.items():
        mod = importlib.import_module(module)
        setattr(mod, attr, wrap(name, getattr(mod, attr)))


def run(x: np.ndarray, m: int | None, spent: dict[str, float]) -> dict[str, float]:
    import daskdepth

    spent.clear()
    c0 = time.process_time()
    model = daskdepth.AIIRW(n_directions=m, random_state=0).fit(x)
    c1 = time.process_time()
    model.score_samples(x)
    c2 = time.process_time()
    out = {"fit": c1 - c0, "score": c2 - c1, "passes": model.n_passes_,
           "bound": model.error_bound_, "m": model.directions_.shape[0]}
    out.update({k: spent.get(k, 0.0) for k in PHASES})
    out["other"] = out["fit"] - sum(spent.get(k, 0.0) for k in PHASES)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--rows", type=int, default=1_000_000,
                    help="rows of the Gaussian data set (10 features)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--markdown", action="store_true",
                    help="write the table into benchmarks/README.md (section 'fit')")
    args = ap.parse_args()
    check_runs(args.repeat, args.markdown)
    import dask

    import daskdepth

    sets = {"Http (567,498 x 3), m = 300": (np.load(args.data)["X"], 300),
            f"Gaussian ({args.rows:,} x 10), m = 1000 (default)":
                (np.random.default_rng(0).normal(size=(args.rows, 10)), None)}
    spent: dict[str, float] = {}
    _timed(spent)
    for x, _ in sets.values():  # kernels loaded (compiled when the cache is empty), untimed
        daskdepth.AIIRW(n_directions=8, random_state=0).fit(x[:70_000]).score_samples(x[:10])
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in sets}
    loads = []
    with dask.config.set(scheduler="sync"):
        for _ in range(args.repeat):
            for name, (x, m) in sets.items():
                runs[name].append(run(x, m, spent))
                loads.append(os.getloadavg()[0])
                print(name, {k: round(v, 3) for k, v in runs[name][-1].items()},
                      file=sys.stderr, flush=True)
    lines = ["AI-IRW fit (`tol=1e-4`) and scoring of every row, synchronous scheduler, "
             "process CPU time (s); the data sets in turns.", "",
             "| data | fit | score | fit / score | fit ns per row-direction | frame | pilot "
             "| histogram | refine | offset | other | passes | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        n = sets[name][0].shape[0]

        def col(key: str, rs: list[dict[str, float]] = rs) -> str:
            return stats([r[key] for r in rs])

        ratio = stats([r["fit"] / r["score"] for r in rs])
        per_rd = stats([r["fit"] / (n * r["m"]) * 1e9 for r in rs], 1)
        lines.append(f"| {name} | {col('fit')} | {col('score')} | {ratio} | {per_rd} | "
                     f"{col('frame')} | {col('pilot')} | {col('histogram')} | {col('refine')} | "
                     f"{col('offset')} | {col('other')} | "
                     f"{statistics.median(r['passes'] for r in rs):.0f} | "
                     f"{max(r['bound'] for r in rs):.3g} |")
    text = header(loads, args.repeat) + "\n" + "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        replace_section("fit", text)


if __name__ == "__main__":
    main()
