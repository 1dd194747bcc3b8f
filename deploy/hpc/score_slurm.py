"""Score a Zarr store with daskdepth on a SLURM cluster, through dask-jobqueue.

This script runs the Dask scheduler (and the daskdepth driver) where it is
started -- a login node, or better a small batch job (see ``driver.sbatch``) --
and submits SLURM jobs that each run Dask workers.  It then runs
``daskdepth score INPUT --out OUTPUT --scheduler <that scheduler>`` and stops
the workers.  INPUT and OUTPUT must be on a file system that the compute nodes
mount under the same path (Lustre, GPFS, NFS...).

Examples::

    # Look at the worker job script without submitting anything:
    python score_slurm.py /scratch/$USER/x.zarr --out /scratch/$USER/depth.zarr \\
        --queue compute --account myproj --print-job-script

    # Four jobs of 32 cores / 128 GB, 4 worker processes each, then score:
    python score_slurm.py /scratch/$USER/x.zarr --out /scratch/$USER/depth.zarr \\
        --queue compute --account myproj --jobs 4 --cores 32 --memory 128GB \\
        --processes 4 --walltime 02:00:00 \\
        --prologue "module load python/3.11" "source $HOME/venvs/daskdepth/bin/activate" \\
        -- --tol 1e-4 --contamination 0.01 --seed 0

Arguments after ``--`` go to ``daskdepth score`` unchanged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    """Options: what to score, and the SLURM jobs that run the workers."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Arguments after -- are passed to 'daskdepth score'.")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score (shared file system)")
    p.add_argument("--out", required=True, metavar="OUTPUT",
                   help="Zarr store to create (shared file system)")
    job = p.add_argument_group("SLURM jobs (one job runs --processes Dask workers)")
    job.add_argument("--jobs", type=int, default=2, help="number of worker jobs (default 2)")
    job.add_argument("--cores", type=int, default=16, help="cores per job (default 16)")
    job.add_argument("--memory", default="64GB",
                     help="memory per job, split between its workers (default 64GB)")
    job.add_argument("--processes", type=int, default=2,
                     help="worker processes per job (default 2); threads per worker = "
                          "cores / processes")
    job.add_argument("--walltime", default="01:00:00", help="job time limit (default 1 h)")
    job.add_argument("--queue", help="SLURM partition (-p)")
    job.add_argument("--account", help="SLURM account (-A)")
    job.add_argument("--interface", help="network interface of the workers and scheduler, "
                                         "e.g. ib0 (default: the host name's address)")
    job.add_argument("--python", help="Python of the workers (default: this one, which "
                                      "must then be on the shared file system)")
    job.add_argument("--local-directory", default="$TMPDIR",
                     help="node-local scratch for worker spill files (default $TMPDIR)")
    job.add_argument("--log-directory", help="directory for the jobs' output files")
    job.add_argument("--prologue", nargs="*", default=[],
                     help="shell lines run before the workers start (module load, venv...)")
    job.add_argument("--directive", dest="directives", action="append", default=[],
                     help="extra #SBATCH directive, e.g. --directive=--constraint=cpu "
                          "(repeatable)")
    job.add_argument("--start-timeout", type=float, default=3600.0,
                     help="seconds to wait for the first worker (queue time)")
    p.add_argument("--print-job-script", action="store_true",
                   help="print the worker job script and exit without submitting")
    return p


def build_cluster(args: argparse.Namespace) -> Any:
    """The SLURMCluster (scheduler started here, no job submitted yet)."""
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(
        cores=args.cores,
        memory=args.memory,
        processes=args.processes,
        queue=args.queue,
        account=args.account,
        walltime=args.walltime,
        interface=args.interface,
        python=args.python,
        local_directory=args.local_directory,
        log_directory=args.log_directory,
        job_script_prologue=list(args.prologue),
        job_extra_directives=list(args.directives),
        # Workers exit by themselves 60 s after losing the scheduler (jobqueue's
        # death-timeout), so a killed driver does not leave jobs running.
        death_timeout=60,
        scheduler_options={"dashboard_address": ":8787"},
    )


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(this script's arguments, daskdepth score's arguments after ``--``)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job; returns the exit status of ``daskdepth score``."""
    own, passthrough = split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    cluster = build_cluster(args)
    try:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        from distributed import Client

        from daskdepth.cli import main as daskdepth_main

        cluster.scale(jobs=args.jobs)
        print(f"scheduler {cluster.scheduler_address}; dashboard {cluster.dashboard_link}; "
              f"waiting for workers from {args.jobs} SLURM job(s)...", file=sys.stderr)
        with Client(cluster) as client:
            client.wait_for_workers(1, timeout=args.start_timeout)
        return daskdepth_main(["score", args.input, "--out", args.out,
                               "--scheduler", cluster.scheduler_address, *passthrough])
    finally:
        cluster.close()


if __name__ == "__main__":
    raise SystemExit(main())
