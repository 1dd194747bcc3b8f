"""Warm fit + score of Http (m = 300, tol = 1e-4) for two or more checkouts of daskdepth.

Each checkout (a source tree, put first on ``PYTHONPATH``) runs in fresh
processes, the trees interleaved so that load changes hit each alike; before
the clock starts each process fits a 70,000-row slice (the timed fit's leaf
path), so the compiled kernels are loaded.  Prints the median [min-max] of
wall and CPU seconds.  Used to tell a regression of the code from a slower
machine: run an old commit beside the current one on the same machine::

    git worktree add /tmp/old 2ed8162
    python benchmarks/compare_http_trees.py /tmp/old . [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "odds" / "http.npz"

CHILD = r"""
import json, sys, time
import numpy as np
import daskdepth
x = np.load(sys.argv[1])["X"]
daskdepth.AIIRW(n_directions=8, random_state=0).fit(x[:70_000]).score_samples(x[:10])
c0, t0 = time.process_time(), time.perf_counter()
model = daskdepth.AIIRW(n_directions=300, random_state=0).fit(x)
t1 = time.perf_counter()
model.score_samples(x)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"fit": t1 - t0, "score": t2 - t1, "total": t2 - t0, "cpu": c2 - c0}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", help="source trees holding a daskdepth package")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default=str(DATA))
    args = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    for _ in range(args.repeat):
        for t in trees:
            out = subprocess.run([sys.executable, "-c", CHILD, args.data], capture_output=True,
                                 text=True, check=True, cwd="/",
                                 env={**os.environ, "PYTHONPATH": t})
            runs[t].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def spread(rs: list[dict], k: str) -> str:
        v = [r[k] for r in rs]
        return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

    for t, rs in runs.items():
        print(f"{t}: total {spread(rs, 'total')} s (fit {spread(rs, 'fit')}, score "
              f"{spread(rs, 'score')}), CPU {spread(rs, 'cpu')} s")
    print("load average:", ", ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
