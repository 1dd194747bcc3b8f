"""The scale model: bytes, tasks and time per pass predicted for 10^9 and 10^10 rows.

Inputs measured by ``bench_scaleout.py`` (``--json`` runs, ``--kernel-cost`` and
``--task-cost`` lines, all in one JSON-lines file or several); the formulas are
those of ``docs/scaleout.md``:

- a summary copied to every worker (``k = 1``): a fit's data pass moves
  ``beta * W * S`` bytes (``S`` the summary, ``beta`` measured), a scoring
  ``(W - 1) * S`` (one copy per worker); rows do not move;
- a summary in replica groups of ``k`` workers: a scoring moves
  ``rho * (k - 1) * D`` bytes (``D`` the data, ``rho`` measured: the prepared
  rows and the partial sums per row), plus ``D / k`` more for each worker
  outside the groups' ``k * floor(W / k)``; a fit's sharded pass, in groups of
  ``k_f`` workers (:func:`daskdepth.runtime.replicas.pass_width`, ``k_f = W``
  when the rows are too few to pay for the copies), moves
  ``sigma * (k_f - 1) * D`` (plus ``D / k_f`` per worker outside the groups)
  and ``2 * (G_f - 1) * S`` for the blocks' copies and the partial counts;
- tasks per pass: a copied (folded) pass ``2 C + 2 W^2 t + 3 B`` (``C`` row
  chunks, ``B`` direction blocks, ``t`` threads per worker), a sharded
  scoring ``C (3 + 2 k)``, a sharded fit pass ``C (1 + 2 k_f t) + B (G_f + 3)``;
- time per pass: ``n m c / (W t) + tasks * tau + bytes / (W * bandwidth)``
  with ``c`` the CPU seconds per row and direction, ``tau`` the scheduler's
  CPU seconds per task, ``bandwidth`` per worker (assumed).

Usage::

    python benchmarks/scale_model.py scaleout.jsonl costs.jsonl [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from typing import Any

from daskdepth.runtime.memory import REPLICATE_SHARE, WorkerMemory, rows_per_chunk, summary_bytes
from daskdepth.runtime.replicas import pass_width

#: Assumed network bandwidth per worker (bytes per second): 10 Gbit/s.
BANDWIDTH = 1.25e9

#: Workers of the prediction: single-threaded, 4 GiB each (as the benchmark's wide runs).
WORKER = WorkerMemory(4 * 2**30, 1)

BLOCK = 32  # directions per block


def inputs(lines: list[dict[str, Any]]) -> dict[str, float]:
    """The measured constants: beta, rho, sigma, c (fit, score) and tau."""
    runs = [r for r in lines if "fit" in r and "per_pass" in r]
    copied = [r for r in runs if not r["sharded"]]
    sharded = [r for r in runs if r["sharded"]]
    out: dict[str, float] = {}
    if copied:  # from the most workers measured: the per-worker share grows with W
        most = max(r["workers"] for r in copied)
        out["beta"] = statistics.median(r["per_pass"]["bytes"] / (r["workers"] * r["summary_bytes"])
                                        for r in copied if r["workers"] == most)
    if sharded:
        full = [r for r in sharded if r["width"] > 1]
        out["rho"] = statistics.median(
            r["score"]["bytes"] / ((r["width"] - 1) * r["data_bytes"]
                                   + (r["workers"] - r["width"] * r["groups"]) * r["data_bytes"]
                                   / r["width"]) for r in full)
        most = max(r["workers"] for r in sharded)
        out["sigma"] = statistics.median(
            (r["per_pass"]["bytes"] - copies) / rows
            for r in sharded if r["workers"] == most
            for rows, copies in [fit_terms(r)] if rows > 0)
    for r in lines:  # per number of features: projecting costs more with more features
        if r.get("histogram_s_per_row_direction"):
            out[f"c_fit_{r['features']}"] = r["histogram_s_per_row_direction"]
        if r.get("score_s_per_row_direction"):
            out[f"c_score_{r['features']}"] = r["score_s_per_row_direction"]
    tasks = [r for r in lines if "cpu_per_task_ms" in r]
    if tasks:
        out["tau"] = statistics.median(r["cpu_per_task_ms"] for r in tasks) / 1e3
    return out


def fit_terms(r: dict[str, Any]) -> tuple[float, float]:
    """A sharded fit pass's bytes: ``(rows term / sigma, copies and partials)``, from its widths."""
    workers, data, s = r["workers"], r["data_bytes"], r["summary_bytes"]
    kf = max(r.get("fit_widths") or [workers])  # older runs: every pass over all workers
    gf = max(1, workers // kf)
    return (kf - 1) * data + (workers - kf * gf) * data / kf, 2 * (gf - 1) * s


def predict(n: int, d: int, workers: int, k: dict[str, float]) -> dict[str, Any]:
    """Bytes, tasks and seconds per fit pass and per scoring for ``n x d`` on ``workers``."""
    m = 100 * d
    s = summary_bytes(m, n, 1e-4)
    data = 8 * n * d
    chunk = rows_per_chunk(d, WORKER)
    chunks = math.ceil(n / chunk)
    blocks = math.ceil(m / BLOCK)
    width = max(1, min(workers, math.ceil(s / (REPLICATE_SHARE * WORKER.limit))))
    groups = max(1, workers // width)
    if width == 1:
        fit_bytes = k["beta"] * workers * s
        score_bytes = (workers - 1) * s
        fit_tasks = 2 * chunks + 2 * workers**2 + 3 * blocks
        score_tasks = chunks
    else:
        kf = pass_width(data, s, workers, WORKER)
        gf = max(1, workers // kf)
        rows, copies = fit_terms({"workers": workers, "data_bytes": data, "summary_bytes": s,
                                  "fit_widths": [kf]})
        fit_bytes = k["sigma"] * rows + copies
        outside = workers - width * groups
        score_bytes = k["rho"] * ((width - 1) * data + outside * data / width)
        fit_tasks = chunks * (1 + 2 * kf) + blocks * (gf + 3)
        score_tasks = chunks * (3 + 2 * width)

    def seconds(c: float, tasks: int, moved: float) -> float:
        return n * m * c / workers + tasks * k["tau"] + moved / (workers * BANDWIDTH)

    return {"rows": n, "features": d, "workers": workers, "summary": s, "k": width,
            "groups": groups, "fit_k": 1 if width == 1 else kf, "chunks": chunks, "data": data,
            "fit_bytes": fit_bytes, "fit_tasks": fit_tasks,
            "fit_s": seconds(k[f"c_fit_{d}"], fit_tasks, fit_bytes),
            "score_bytes": score_bytes, "score_tasks": score_tasks,
            "score_s": seconds(k[f"c_score_{d}"], score_tasks, score_bytes)}


def _size(b: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b / 1e3:,.0f} kB"


def _time(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="JSON-lines files of bench_scaleout.py")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    lines = []
    for path in args.files:
        with open(path) as f:
            lines += [json.loads(line) for line in f if line.strip().startswith("{")]
    k = inputs(lines)
    print("measured inputs:", json.dumps({key: float(f"{v:.4g}") for key, v in k.items()}))
    rows = [predict(n, d, w, k) for d in (5, 40) for n in (10**9, 10**10) for w in (16, 100)]
    if not args.markdown:
        for r in rows:
            print(json.dumps(r))
        return 0
    print("| data | workers | summary, k x groups | fit pass k | chunks | "
          "fit pass: moved / tasks / time | scoring: moved / tasks / time |\n"
          "|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| 10^{round(math.log10(r['rows']))} x {r['features']} ({_size(r['data'])}) | "
              f"{r['workers']} | {_size(r['summary'])}, {r['k']} x {r['groups']} | "
              f"{r['fit_k']} | {r['chunks']:,} | {_size(r['fit_bytes'])} / {r['fit_tasks']:,} / "
              f"{_time(r['fit_s'])} | {_size(r['score_bytes'])} / {r['score_tasks']:,} / "
              f"{_time(r['score_s'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
