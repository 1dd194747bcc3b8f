"""Command line interface: ``daskdepth score | fit | apply | info | demo``.

Every job reads a Zarr store, runs on a Dask cluster (an existing scheduler
given by ``--scheduler``, or a local one sized to the machine) and writes its
result safely: to a temporary sibling of the output, moved into place only
when complete (see :mod:`daskdepth._io`).

Exit status: 0 on success, 2 for usage errors (bad options, an output that
exists without ``--overwrite``, an output that is the input), 1 when the job
fails (missing or bad input, NaN/inf rows, a corrupted model, ...).  Errors are
reported in one or two lines; ``--debug`` shows the traceback.

Examples
--------
>>> from daskdepth.cli import main
>>> main(["--version"])  # doctest: +ELLIPSIS
daskdepth ...
0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._validation import check_params

#: ``--scheduler`` values that select a local Dask scheduler instead of a cluster.
LOCAL_SCHEDULERS = ("threads", "synchronous")
#: Rows and features of the demo data set.
DEMO_ROWS = 200_000
DEMO_FEATURES = 4
#: Share of planted outliers in the demo data set.
DEMO_OUTLIERS = 0.02

_DESCRIPTION = """\
Distributed AI-IRW and IRW data depth over Zarr stores.

commands:
  score INPUT --out OUTPUT     fit on INPUT and write the depth of its rows
  fit INPUT --model MODEL      fit on INPUT and save the model
  apply MODEL INPUT --out OUT  score INPUT with a saved model
  info PATH                    describe a saved model or an output store
  demo [--out OUTPUT]          run the main job on a built-in data set

INPUT is a Zarr store (format 2 or 3): a single 2-D array (samples x
features), a group with --array NAME, or an xarray dataset with
--array VARIABLE.  OUTPUT opens with xarray.open_zarr as a dataset with
the variable 'depth' over the sample dimension."""

_EPILOG = """\
exit status: 0 success, 1 the job failed, 2 usage error.
Outputs are written to a temporary sibling (OUTPUT.daskdepth-tmp-*) and moved
into place when complete; an existing OUTPUT is replaced only with --overwrite.
With --scheduler ADDRESS, INPUT and OUTPUT must be on storage that the workers
reach under the same path."""


class UsageError(Exception):
    """Bad command line: exit status 2."""


# --------------------------------------------------------------------------- argument types


def _argument(convert: Callable[[str], Any], expected: str,
              check: Callable[[Any], None] | None = None) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then ``check`` the value (ValueError = bad)."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if check is not None:
            try:
                check(value)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    return parse


def _require(ok: Callable[[Any], bool], message: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not ok(value):
            raise ValueError(message.format(value))
    return check


# Ranges of the estimators' parameters come from the estimators' own check.
_positive_int = _argument(int, "a positive integer",
                          _require(lambda v: v >= 1, "expected a positive integer, got {}"))
_seed = _argument(int, "an integer seed",
                  _require(lambda v: 0 <= v < 2**32, "the seed must be in [0, 2**32), got {}"))
_tol = _argument(float, "a number",
                 lambda v: check_params(n_directions=None, tol=v, nan_policy="raise"))
_contamination = _argument(
    float, "a number",
    lambda v: check_params(n_directions=None, tol=0.0, nan_policy="raise", contamination=v))


def build_parser() -> argparse.ArgumentParser:
    """The ``daskdepth`` argument parser (subcommands score, fit, apply, info, demo)."""
    from . import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (no status lines, no progress bar)")
    common.add_argument("--debug", action="store_true",
                        help="show the full traceback of errors")

    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument("--scheduler", metavar="ADDRESS",
                         help="address of a running Dask scheduler (e.g. tcp://host:8786); "
                              "'threads' or 'synchronous' for Dask's local schedulers; default: "
                              "a local cluster sized to this machine")

    fitting = argparse.ArgumentParser(add_help=False)
    fitting.add_argument("--depth", choices=("ai-irw", "irw"), default="ai-irw",
                         help="depth notion (default: ai-irw)")
    fitting.add_argument("--n-directions", type=_positive_int, metavar="M",
                         help="number of random directions (default: 100 x features)")
    fitting.add_argument("--covariance", default="sample", metavar="NAME",
                         help="covariance estimate for AI-IRW, as covariance= of "
                              "daskdepth.AIIRW (default: sample)")
    fitting.add_argument("--tol", type=_tol, default=1e-4, metavar="T",
                         help="certified bound on the depth error (default: 1e-4; 0: exact)")
    fitting.add_argument("--seed", type=_seed, metavar="S",
                         help="random seed (default: drawn at random and recorded)")
    fitting.add_argument("--contamination", type=_contamination, metavar="C",
                         help="share of outliers: also write boolean 'outlier' flags")
    fitting.add_argument("--nan-policy", choices=("raise", "omit"), default="raise",
                         help="rows with NaN/inf: fail (raise, default) or give them NaN depth")

    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--array", metavar="NAME",
                        help="array (or dataset variable) of a Zarr group to read")
    source.add_argument("--overwrite", action="store_true",
                        help="replace an existing output")

    parser = argparse.ArgumentParser(
        prog="daskdepth", description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"daskdepth {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("score", parents=[common, cluster, fitting, source],
                       help="fit on INPUT and write the depth of its rows",
                       description="Fit the depth on INPUT and write the depth of each of its "
                                   "rows to OUTPUT.")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")
    p.set_defaults(func=_cmd_score)

    p = sub.add_parser("fit", parents=[common, cluster, fitting, source],
                       help="fit on INPUT and save the model",
                       description="Fit the depth on INPUT and save the model as a Zarr store "
                                   "(arrays and JSON attributes, no pickle).")
    p.add_argument("input", metavar="INPUT", help="Zarr store of reference rows")
    p.add_argument("--model", required=True, metavar="MODEL", help="model store to create")
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("apply", parents=[common, cluster, source],
                       help="score INPUT with a saved model",
                       description="Write the depth of the rows of INPUT with respect to the "
                                   "reference a saved MODEL was fitted on.")
    p.add_argument("model", metavar="MODEL", help="model saved by 'daskdepth fit'")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")
    p.add_argument("--contamination", type=_contamination, metavar="C",
                   help="write 'outlier' flags for this share of the reference rows (default: "
                        "the contamination given to 'fit', if any)")
    p.set_defaults(func=_cmd_apply)

    p = sub.add_parser("info", parents=[common],
                       help="describe a saved model or an output store",
                       description="Print what a saved model or a depth output store holds.")
    p.add_argument("path", metavar="MODEL_OR_OUTPUT")
    p.add_argument("--json", action="store_true", help="print the attributes as JSON")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("demo", parents=[common, cluster],
                       help="run the main job on a built-in data set",
                       description="Score a built-in data set (200,000 x 4 Gaussian rows with 2%% "
                                   "planted outliers, seed 0) with the same code as 'score' and "
                                   "report the time, the error bound and how well the depth "
                                   "finds the planted outliers.")
    p.add_argument("--out", metavar="OUTPUT",
                   help="Zarr store to create (default: in a new temporary directory)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--rows", type=_positive_int, default=DEMO_ROWS, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_demo)
    return parser


# --------------------------------------------------------------------------- terminal


class UI:
    """Status lines and progress bars on stderr."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        stream = sys.stderr
        self.progress = not quiet and hasattr(stream, "isatty") and stream.isatty()

    def status(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)

    def result(self, message: str) -> None:
        if not self.quiet:
            print(message, flush=True)


def _format_warning(message: Any, category: type, filename: str, lineno: int,
                    file: Any = None, line: Any = None) -> None:
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"daskdepth: warning: {text}", file=sys.stderr, flush=True)


class _SpanProgress:
    """Progress bar of the fitting phases, polled from the scheduler's spans.

    The fit runs ``dask.compute`` on the default client; its phases are
    tagged ``("daskdepth", phase)`` and the scheduler counts their tasks by
    state, which this thread draws on stderr.
    """

    def __init__(self, client: Any, label: str, width: int = 40) -> None:
        self.client = client
        self.label = label
        self.width = width
        self.start = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _SpanProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        sys.stderr.write("\33[2K\r")
        sys.stderr.flush()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                phase, done, total = self.client.run_on_scheduler(_current_phase,
                                                                  since=self.start)
            except Exception:  # e.g. a remote scheduler without daskdepth installed
                return
            frac = done / total if total else 0.0
            bar = "#" * int(self.width * frac)
            elapsed = time.time() - self.start
            what = f"{self.label}: {phase}" if phase else self.label
            sys.stderr.write(f"\r[{bar:<{self.width}}] | {int(100 * frac):3d}% | {what} | "
                             f"{elapsed:5.1f}s\33[K")
            sys.stderr.flush()


def _current_phase(since: float = 0.0, dask_scheduler: Any = None) -> tuple[str, int, int]:
    """(phase, done tasks, tasks) of the latest daskdepth span started after ``since``."""
    ext = dask_scheduler.extensions.get("spans")
    if ext is None:
        return "", 0, 0
    spans = [s for s in ext.spans_search_by_tag.get("daskdepth", [])
             if len(s.name) >= 2 and s.enqueued >= since]
    if not spans:
        return "", 0, 0
    latest = spans[-1]
    states = latest.states
    total = sum(states.values())
    done = sum(states.get(k, 0) for k in ("memory", "released", "forgotten", "erred"))
    return str(latest.name[1]), int(done), int(total)


class Runner:
    """Where a job's Dask computations run, and how their progress is shown.

    ``address`` None starts a local in-process cluster (threads, one worker
    sized to the machine); 'threads' or 'synchronous' use Dask's local
    schedulers; anything else is the address of a running scheduler.
    """

    def __init__(self, address: str | None, ui: UI, debug: bool = False) -> None:
        self.address = address
        self.ui = ui
        self.debug = debug
        self.client: Any = None
        self.cluster: Any = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Runner:
        import dask

        address = self.address
        try:
            if address in LOCAL_SCHEDULERS:
                self._stack.enter_context(dask.config.set(scheduler=address))
                return self
            from distributed import Client, LocalCluster

            if address:
                try:
                    timeout = dask.config.get("distributed.comm.timeouts.connect", "30s")
                    self.client = Client(address, timeout=timeout, set_as_default=True)
                except (OSError, TimeoutError) as exc:
                    raise ConnectionError(f"cannot connect to the Dask scheduler at "
                                          f"{address!r}: {exc}") from None
                self.ui.status(f"connected to the Dask scheduler at {address} "
                               f"(dashboard: {self.client.dashboard_link})")
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # e.g. the dashboard port is taken
                    self.cluster = LocalCluster(
                        processes=False, dashboard_address=":8787",
                        silence_logs=logging.WARNING if self.debug else logging.CRITICAL)
                self.client = Client(self.cluster, set_as_default=True)
                nthreads = sum(self.client.nthreads().values())
                link = self.client.dashboard_link
                note = "" if _has_bokeh() else " (install bokeh to use it)"
                self.ui.status(f"local Dask cluster with {nthreads} threads; dashboard: "
                               f"{link}{note}")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for obj in (self.client, self.cluster):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self.client = self.cluster = None
        self._stack.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def progress(self, label: str) -> Iterator[None]:
        """Progress of the computations run inside (a bar on stderr when it is a terminal)."""
        if not self.ui.progress:
            yield
            return
        if self.client is None:
            from dask.diagnostics import ProgressBar

            self.ui.status(f"{label}:")
            with ProgressBar(minimum=1.0, out=sys.stderr):
                yield
            return
        with _SpanProgress(self.client, label):
            yield

    def compute(self, collection: Any, label: str) -> Any:
        """Compute a dask collection, with a progress bar of its tasks when wanted."""
        import dask

        if self.client is None:
            with self.progress(label):
                return dask.compute(collection)[0]
        future = self.client.compute(collection)
        if self.ui.progress:
            from distributed.diagnostics.progressbar import progress

            self.ui.status(f"{label}:")
            with contextlib.redirect_stdout(sys.stderr):
                progress(future)
        return future.result()


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


# --------------------------------------------------------------------------- jobs


def _make_model(args: argparse.Namespace, seed: int) -> Any:
    from ._estimators import AIIRW, IRW

    kwargs: dict[str, Any] = dict(n_directions=args.n_directions, tol=args.tol,
                                  random_state=seed, nan_policy=args.nan_policy)
    if args.contamination is not None:
        kwargs["contamination"] = args.contamination
    if args.depth == "ai-irw":
        return AIIRW(covariance=args.covariance, **kwargs)
    return IRW(**kwargs)


def _input_attrs(source: Any, prefix: str = "input") -> dict[str, Any]:
    from ._io import is_url, local_path

    path = source.path if is_url(source.path) else str(local_path(source.path))
    attrs = {f"{prefix}_path": path, f"{prefix}_shape": list(source.shape),
             f"{prefix}_dtype": str(source.data.dtype),
             f"{prefix}_zarr_format": int(source.zarr_format)}
    if source.array is not None:
        attrs[f"{prefix}_array"] = source.array
    return attrs


def _job_attrs(model: Any, command: str, argv: Sequence[str]) -> dict[str, Any]:
    from ._persistence import utc_now, versions
    from ._xarray import model_attrs

    attrs: dict[str, Any] = {"title": "daskdepth depth scores", "daskdepth_command": command}
    attrs.update({k: v for k, v in model_attrs(model).items()
                  if k not in ("long_name", "valid_range")})
    attrs["contamination"] = float(model.contamination)
    attrs["offset"] = float(model.offset_)
    for lib, version in versions().items():
        attrs[f"{lib}_version"] = version
    attrs["created"] = utc_now()
    attrs["command_line"] = shlex.join(["daskdepth", *argv])
    return attrs


def _check_features(model: Any, source: Any) -> None:
    names = getattr(model, "feature_names_in_", None)
    if source.shape[1] != model.n_features_in_:
        raise ValueError(f"INPUT has {source.shape[1]} features but the model was fitted on "
                         f"{model.n_features_in_}")
    coord = source.data.coords.get(source.data.dims[1])
    if names is not None and coord is not None and coord.dtype.kind in "OUS":
        have = [str(v) for v in np.asarray(coord.values)]
        if have != [str(v) for v in names]:
            raise ValueError(f"INPUT's features {have} differ from the model's "
                             f"{[str(v) for v in names]}")


def _write_depth(runner: Runner, ui: UI, model: Any, source: Any, out: Any,
                 contamination: float | None, attrs: dict[str, Any]) -> None:
    from ._io import write_dataset
    from ._xarray import depth_dataset

    ds = depth_dataset(model, source.data, contamination=contamination, attrs=attrs)
    if contamination is not None:
        ds.attrs["contamination"] = float(contamination)
        ds.attrs["offset"] = float(ds["outlier"].attrs["offset"])
    else:
        ds.attrs.pop("contamination", None)
        ds.attrs.pop("offset", None)
    write_dataset(ds, out.path, compute=lambda d: runner.compute(d, "scoring and writing"))


def _fit(runner: Runner, ui: UI, model: Any, source: Any) -> float:
    start = time.time()
    label = f"fitting {model._depth_kind.upper()}"
    ui.status(f"{label} on {source.describe()}")
    with runner.progress(label):
        model.fit(source.data)
    elapsed = time.time() - start
    ui.status(f"fitted in {elapsed:.1f} s: {model.n_directions_} directions, certified error "
              f"bound {model.error_bound_:.3g}, {model.n_passes_ + 1} pass(es) over the data")
    return elapsed


def _open(path: str, array: str | None, min_rows: int = 1) -> Any:
    from ._io import InputError, open_input

    source = open_input(path, array)
    if source.shape[0] < min_rows:
        noun = "row" if source.shape[0] == 1 else "rows"
        raise InputError(f"{source.describe()} has {source.shape[0]} {noun}; a depth "
                         f"reference needs at least {min_rows}")
    return source


def run_score(args: argparse.Namespace, ui: UI,
              argv: Sequence[str]) -> tuple[Path, Any, float, int]:
    """The ``score`` job: fit on INPUT, write the depth of its rows to OUTPUT.

    Returns the output path, the fitted model, the seconds taken and the rows scored.
    """
    from ._io import SafeOutput, check_output

    check_output(args.out, inputs=[args.input], overwrite=args.overwrite)
    source = _open(args.input, args.array, min_rows=2)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    model = _make_model(args, seed)
    start = time.time()
    with SafeOutput(args.out, overwrite=args.overwrite, inputs=[args.input]) as out, \
            Runner(args.scheduler, ui, getattr(args, "debug", False)) as runner:
        _fit(runner, ui, model, source)
        attrs = _job_attrs(model, "score", argv)
        attrs.update(_input_attrs(source))
        _write_depth(runner, ui, model, source, out, args.contamination, attrs)
        target = out.commit()
    return target, model, time.time() - start, source.shape[0]


def _cmd_score(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    target, model, elapsed, rows = run_score(args, ui, argv)
    ui.result(f"wrote the {model._depth_kind.upper()} depth of {rows:,} rows to {target} in "
              f"{elapsed:.1f} s (error bound {model.error_bound_:.3g})")
    return 0


def _cmd_fit(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    from ._io import check_output
    from ._persistence import save_model

    check_output(args.model, inputs=[args.input], overwrite=args.overwrite)
    source = _open(args.input, args.array, min_rows=2)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    model = _make_model(args, seed)
    with Runner(args.scheduler, ui, getattr(args, "debug", False)) as runner:
        elapsed = _fit(runner, ui, model, source)
    metadata = {"command_line": shlex.join(["daskdepth", *argv]),
                "contamination_given": args.contamination is not None, "seed": seed}
    metadata.update(_input_attrs(source))
    target = save_model(model, args.model, overwrite=args.overwrite, metadata=metadata)
    ui.result(f"saved the {model._depth_kind.upper()} model fitted on {model.n_samples_fit_:,} "
              f"rows to {target} ({elapsed:.1f} s, error bound {model.error_bound_:.3g})")
    return 0


def _cmd_apply(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    from ._io import SafeOutput, check_output
    from ._persistence import load_model, read_attributes

    check_output(args.out, inputs=[args.input, args.model], overwrite=args.overwrite)
    doc = read_attributes(args.model)
    model = load_model(args.model)
    source = _open(args.input, args.array)
    _check_features(model, source)
    meta = doc.get("metadata", {}) or {}
    contamination = args.contamination
    if contamination is None and meta.get("contamination_given"):
        contamination = float(model.contamination)
    start = time.time()
    with SafeOutput(args.out, overwrite=args.overwrite, inputs=[args.input, args.model]) as out, \
            Runner(args.scheduler, ui, getattr(args, "debug", False)) as runner:
        attrs = _job_attrs(model, "apply", argv)
        attrs.update(_input_attrs(source))
        attrs["model_path"] = args.model if "://" in args.model else str(
            Path(args.model).expanduser().resolve())
        attrs["model_created"] = str(doc.get("created", ""))
        for key in ("input_path", "input_array", "input_shape"):
            if key in meta:
                attrs[key.replace("input", "reference", 1)] = meta[key]
        _write_depth(runner, ui, model, source, out, contamination, attrs)
        target = out.commit()
    ui.result(f"wrote the {model._depth_kind.upper()} depth of {source.shape[0]:,} rows to "
              f"{target} in {time.time() - start:.1f} s")
    return 0


def _cmd_info(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    from ._io import InputError
    from ._persistence import ModelFormatError, read_attributes

    try:
        doc = read_attributes(args.path)
    except ModelFormatError as exc:
        if "not a daskdepth model" not in str(exc):
            raise
        doc = None
    if doc is not None:
        if args.json:
            print(json.dumps({k: doc[k] for k in ("format", "format_version", "estimator",
                                                  "params", "versions", "created", "metadata")
                              if k in doc}, indent=2))
            return 0
        print(_describe_model(args.path, doc))
        return 0
    attrs, text = _output_info(args.path)
    if attrs is None:
        raise InputError(f"{args.path!r} is neither a daskdepth model nor a daskdepth output")
    if args.json:
        print(json.dumps(attrs, indent=2, default=str))
    else:
        print(text)
    return 0


def _describe_model(path: str, doc: dict[str, Any]) -> str:
    from ._persistence import load_model

    model = load_model(path)
    lines = [f"daskdepth model {path}",
             f"  estimator:      {doc['estimator']} ({model._depth_kind})",
             "  parameters:     " + ", ".join(f"{k}={v!r}" for k, v in
                                               model.get_params().items()),
             f"  fitted on:      {model.n_samples_fit_:,} rows x {model.n_features_in_} features",
             f"  directions:     {model.n_directions_}",
             f"  error bound:    {model.error_bound_:.3g}",
             f"  offset:         {model.offset_:.6g} (contamination {model.contamination})"]
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        lines.append(f"  features:       {', '.join(map(str, names))}")
    meta = doc.get("metadata") or {}
    if "input_path" in meta:
        lines.append(f"  reference:      {meta['input_path']}"
                     + (f" (array {meta['input_array']!r})" if meta.get("input_array") else ""))
    lines.append(f"  format version: {doc['format_version']}")
    lines.append(f"  saved:          {doc.get('created', '?')} by daskdepth "
                 f"{doc.get('versions', {}).get('daskdepth', '?')}")
    return "\n".join(lines)


def _output_info(path: str) -> tuple[dict[str, Any] | None, str]:
    import xarray as xr

    from ._io import is_url, local_path, quiet_zarr

    if not is_url(path) and not local_path(path).exists():
        raise FileNotFoundError(f"{path!r} does not exist")
    try:
        with quiet_zarr():
            ds = xr.open_zarr(path)
    except Exception:
        return None, ""
    if "depth" not in ds.data_vars or "daskdepth_version" not in ds.attrs:
        return None, ""
    attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ds.attrs.items()}
    depth = ds["depth"]
    lines = [f"daskdepth output {path}",
             "  variables:      " + ", ".join(f"{k} {ds[k].dims}" for k in ds.data_vars),
             f"  rows:           {depth.shape[0]:,}"]
    skip = {"title"}
    for key, value in attrs.items():
        if key not in skip:
            lines.append(f"  {key + ':':<22}{value}")
    return attrs, "\n".join(lines)


# --------------------------------------------------------------------------- demo


def demo_data(rows: int = DEMO_ROWS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The demo data set: correlated Gaussian rows and planted outliers.

    Returns ``(X, planted)``: ``rows x 4`` float64 rows, of which a share of
    ``DEMO_OUTLIERS`` (flagged in the boolean ``planted``) is moved 4 to 6
    standard deviations (in the Mahalanobis sense) from the centre along random
    directions, a shift that stays inside the per-feature ranges.

    Examples
    --------
    >>> X, planted = demo_data(1000)
    >>> X.shape, int(planted.sum())
    ((1000, 4), 20)
    """
    rng = np.random.default_rng(seed)
    d = DEMO_FEATURES
    mixing = np.array([[2.0, 0.0, 0.0, 0.0],
                       [1.2, 0.8, 0.0, 0.0],
                       [-0.5, 0.3, 0.5, 0.0],
                       [0.1, -0.2, 0.4, 3.0]])
    z = rng.standard_normal((rows, d))
    n_out = int(round(DEMO_OUTLIERS * rows))
    planted = np.zeros(rows, dtype=bool)
    planted[rng.choice(rows, size=n_out, replace=False)] = True
    u = rng.standard_normal((n_out, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z[planted] = 0.3 * z[planted] + u * rng.uniform(4.0, 6.0, size=(n_out, 1))
    X = z @ mixing.T + np.array([10.0, -3.0, 0.5, 100.0])
    return X, planted


def _auroc(score: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, score))


def _write_demo_input(path: Path, rows: int) -> np.ndarray:
    import xarray as xr

    from ._io import quiet_zarr

    X, planted = demo_data(rows)
    chunk = max(1024, math.ceil(rows / 8))
    ds = xr.Dataset(
        {"X": (("sample", "feature"), X), "planted": (("sample",), planted)},
        coords={"sample": np.arange(rows)},
        attrs={"description": "daskdepth demo: correlated Gaussian rows with planted "
                              "outliers (seed 0)"},
    )
    ds["X"].encoding = {"chunks": (chunk, X.shape[1])}
    ds["planted"].encoding = {"chunks": (chunk,)}
    with quiet_zarr():
        ds.to_zarr(str(path), mode="w-", consolidated=True, zarr_format=3)
    return planted


def _cmd_demo(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    import xarray as xr

    from ._io import check_output, quiet_zarr

    if args.out is not None:
        target = check_output(args.out, overwrite=args.overwrite)
        workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-", dir=target.parent))
        out, keep = str(target), False
    else:
        workdir = Path(tempfile.mkdtemp(prefix="daskdepth-demo-"))
        out, keep = str(workdir / "demo-depth.zarr"), True
    ok = False
    try:
        source = workdir / "demo-input.zarr"
        planted = _write_demo_input(source, args.rows)
        ui.status(f"demo input: {args.rows:,} x {DEMO_FEATURES} rows ({int(planted.sum()):,} "
                  f"planted outliers) written to {source}")
        job = argparse.Namespace(input=str(source), out=out, array="X", depth="ai-irw",
                                 n_directions=None, covariance="sample", tol=1e-4, seed=0,
                                 contamination=DEMO_OUTLIERS, nan_policy="raise",
                                 scheduler=args.scheduler, overwrite=args.overwrite,
                                 debug=args.debug)
        target, model, elapsed, _ = run_score(job, ui, argv)
        with quiet_zarr():
            depth = xr.open_zarr(str(target))["depth"].values
        auroc = _auroc(-depth, planted)
        ok = True
    finally:
        if not (keep and ok):
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"daskdepth demo: AI-IRW depth of {args.rows:,} rows x {DEMO_FEATURES} features "
          f"({int(planted.sum()):,} planted outliers)")
    print(f"  time:        {elapsed:.1f} s (fit and score, {model.n_directions_} directions, "
          f"{model.n_passes_ + 1} pass(es) over the data)")
    print(f"  error bound: {model.error_bound_:.3g} (certified, tol 1e-4)")
    print(f"  AUROC:       {auroc:.4f} (low depth vs the planted outliers)")
    print(f"  output:      {target}")
    print(f"  next:        daskdepth info {shlex.quote(str(target))}")
    return 0


# --------------------------------------------------------------------------- main


def _error_lines(exc: BaseException) -> list[str]:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.replace("pass nan_policy='omit'", "pass --nan-policy omit")
    lines = [f"daskdepth: error: {text}"]
    if not isinstance(exc, (ValueError, OSError, UsageError, KeyError, TypeError,
                            ConnectionError)):
        lines[0] = f"daskdepth: error: {type(exc).__name__}: {text}"
        lines.append("(run with --debug for the traceback)")
    return lines


class _Terminated(BaseException):
    """SIGTERM received: unwind so that temporaries are removed."""


def _raise_on_sigterm() -> Any:
    """Turn SIGTERM into an exception (in the main thread); return the undo function."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - unusual platforms
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, old)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``daskdepth`` command line; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 1 when the job failed, 2 for a usage error.
    """
    from ._io import OutputError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    ui = UI(quiet=args.quiet)
    restore_sigterm = _raise_on_sigterm()
    log = logging.getLogger("distributed")
    level = log.level
    if not args.debug:
        log.setLevel(logging.CRITICAL)  # task errors are reported once, below
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _format_warning
            warnings.filterwarnings("ignore", module="distributed")
            return int(args.func(args, ui, argv))
    except (OutputError, UsageError) as exc:
        if args.debug:
            traceback.print_exc()
        for line in _error_lines(exc):
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("daskdepth: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("daskdepth: terminated", file=sys.stderr)
        return 143
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        for line in _error_lines(exc):
            print(line, file=sys.stderr)
        return 1
    finally:
        log.setLevel(level)
        restore_sigterm()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
