"""The jobs of the command line: ``score``, ``fit``, ``apply``, ``drift``, ``update``, ``info``.

Every job checks its output path and opens its input before it starts a
cluster, so that a bad command fails at once; it then fits and/or scores on
the :class:`~daskdepth.cli.cluster.Runner` and writes through
:class:`~daskdepth.storage.atomic.SafeOutput` (a temporary sibling moved into
place when complete).  Outputs record what was run: the parameters, the
certified error bound, the input, the versions and the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import shlex
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import InputError, MissingInputError, OutputError
from ..estimators import DepthDetector, make_estimator
from ..estimators.base import capable
from ..estimators.drift import drift
from ..estimators.inputs import samples_first
from ..estimators.warmup import warm_workers
from ..io.inputs import ZarrInput, open_input
from ..io.models import load_model
from ..io.outputs import write_dataset
from ..io.xarray import depth_dataset, model_attrs
from ..runtime.progress import passes_text
from ..storage.atomic import ExclusiveLock, SafeOutput, StoreBusyError, clean_leftovers
from ..storage.modelformat import is_model, read_attributes, save_model, utc_now, versions
from ..storage.paths import is_url, local_path, open_dataset
from ..storage.targets import check_output
from .cluster import Runner
from .parser import cli_message, estimator_params
from .ui import UI, CommandUsageError, ModelBusyError, printable

#: Seeds drawn for jobs without ``--seed`` lie in [0, SEED_RANGE).
SEED_RANGE = 2**31
#: Keys of a model's document that ``info --json`` prints.
MODEL_INFO_KEYS = ("format", "format_version", "estimator", "params", "versions", "created",
                   "metadata")


class ScoreResult(NamedTuple):
    """What a ``score`` job made: where, with which model, in how long, for how many rows."""

    target: Path
    model: DepthDetector
    seconds: float
    rows: int
    flagged: int | None  # rows flagged as outliers; None without --contamination
    passes: str = ""  # the fit's passes over the data (:func:`fit`)


class Fitted(NamedTuple):
    """How long a fit took, and its passes over the data (the phases that read every row)."""

    seconds: float
    passes: str  # e.g. "3 passes over the data (moments 1, histogram 1, refine 1)"


class OutputInfo(NamedTuple):
    """A daskdepth output store's attributes (JSON-ready) and their description."""

    attrs: dict[str, Any]
    text: str


# --------------------------------------------------------------------------- shared steps


def make_model(args: argparse.Namespace, seed: int) -> DepthDetector:
    """The estimator the options ask for, through :func:`daskdepth.estimators.make_estimator`."""
    return make_estimator(args.depth, **estimator_params(args, seed))


def draw_seed(seed: int | None) -> int:
    """``seed``, or a fresh one (recorded in the output, so the job can be repeated)."""
    return seed if seed is not None else secrets.randbelow(SEED_RANGE)


def runner(args: argparse.Namespace, ui: UI) -> Runner:
    """Where the job's computations run, as the cluster options say."""
    return Runner(args.scheduler, ui, args.debug, timeout=args.timeout,
                  dashboard_address=args.dashboard_address)


def prepare_output(path: str, inputs: Sequence[str] = (), overwrite: bool = False) -> Path:
    """Check, before any work, that the job may and can write ``path``.

    Leftovers of a killed job on the same path go first (an old output that job
    had moved aside comes back, so the checks see what is really there), then
    :func:`~daskdepth.storage.targets.check_output`, then whether the directory
    is writable at all (a read-only destination must not be found after fitting).
    """
    if not is_url(path) and local_path(path).parent.is_dir():
        clean_leftovers(path)
    target = check_output(path, inputs=inputs, overwrite=overwrite)
    try:
        tempfile.TemporaryFile(dir=target.parent).close()
    except OSError as exc:
        raise OutputError(f"cannot write {path!r}: directory {str(target.parent)!r} is not "
                          f"writable ({exc.strerror or exc})") from None
    return target


def open_source(path: str, array: str | None, min_rows: int = 1,
                sample_dim: str | None = None, fill_missing: bool = False,
                n_features: int | None = None) -> ZarrInput:
    """Open INPUT, refusing it when it has fewer than ``min_rows`` rows.

    The sample dimension is ``sample_dim`` (``--sample-dim``) when given, else
    picked by the rule of the Python API
    (:func:`daskdepth.estimators.inputs.samples_first`): the dimension named
    ``sample``, else the one not named ``feature``, else the first, an
    orientation the names leave open and the shape contradicts being refused
    (``n_features``: the model's, when scoring with one).  So a variable
    stored as (feature, time) is read with time as the samples, as
    ``model.fit(ds['X'])`` reads it.  Warns when the input still has more
    features than rows.  Missing chunks of the input are refused unless
    ``fill_missing`` (``--fill-missing-chunks``).
    """
    missing = "fill" if fill_missing else "raise"
    source = open_input(path, array, sample_dim=sample_dim, missing_chunks=missing)
    if sample_dim is None:
        found = _sample_dim(source, n_features)
        if found != source.sample_dim:  # opened again, its rows chunked along that dimension
            source = open_input(path, array, sample_dim=found, missing_chunks=missing)
    n, d = source.shape
    if n < min_rows:
        noun = "row" if n == 1 else "rows"
        raise InputError(f"{source.describe()} has {n} {noun}; a depth "
                         f"reference needs at least {min_rows}")
    if d > n and sample_dim is None:
        other = str(source.data.dims[1])
        warnings.warn(f"{source.describe()}: more features ({d:,}, along {other!r}) than rows "
                      f"({n:,}, along {source.sample_dim!r}); if the samples run along "
                      f"{other!r}, pass --sample-dim {other}", UserWarning, stacklevel=2)
    return source


def _sample_dim(source: ZarrInput, n_features: int | None) -> str:
    """The dimension of INPUT that holds the samples, by the rule of the Python API."""
    try:
        return str(samples_first(source.data, None, source.describe().partition(":")[0],
                                 n_features=n_features).dims[0])
    except ValueError as exc:
        raise InputError(cli_message(str(exc))) from None


def recorded_path(path: str) -> str:
    """How a path is recorded in attributes: URLs as given, local paths absolute."""
    return path if is_url(path) else str(local_path(path))


def input_attrs(source: ZarrInput) -> dict[str, Any]:
    """Attributes that say which input a job read."""
    attrs = {"input_path": recorded_path(source.path), "input_shape": list(source.shape),
             "input_dtype": str(source.data.dtype), "input_zarr_format": int(source.zarr_format)}
    if source.array is not None:
        attrs["input_array"] = source.array
    return attrs


def job_attrs(model: DepthDetector, command: str, argv: Sequence[str]) -> dict[str, Any]:
    """Attributes of an output: the method and its parameters, versions, time, command line."""
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


def check_features(model: DepthDetector, source: ZarrInput, model_path: str) -> None:
    """Refuse an INPUT whose features differ from the model's (in number, or by name)."""
    names = getattr(model, "feature_names_in_", None)
    where = source.path if source.array is None else f"{source.path} (array {source.array!r})"
    if source.shape[1] != model.n_features_in_:
        raise ValueError(f"{where} has {source.shape[1]} features but the model "
                         f"{model_path} was fitted on {model.n_features_in_}; score data with "
                         "the model's features")
    coord = source.data.coords.get(source.data.dims[1])
    if names is not None and coord is not None and coord.dtype.kind in "OUS":
        have = [str(v) for v in np.asarray(coord.values)]
        if have != [str(v) for v in names]:
            raise ValueError(f"the features of {where}, {have}, differ from those of the "
                             f"model {model_path}, {[str(v) for v in names]}")


def with_model_features(model: DepthDetector, source: ZarrInput) -> ZarrInput:
    """``source`` with its features named as the model's, once :func:`check_features` passed.

    The command line compares feature names only when the model and INPUT both
    have them, and otherwise matches features by position.  The estimator
    would warn about names on one side only, in scikit-learn's words ("X does
    not have valid feature names"), about a choice made here: so an INPUT
    without names gets the model's, and the names of an INPUT are dropped for
    a model fitted without any.
    """
    data = source.data
    dim = data.dims[1]
    coord = data.coords.get(dim)
    has_names = coord is not None and coord.dtype.kind in "OUS"
    names = getattr(model, "feature_names_in_", None)
    if names is None and has_names:
        data = data.drop_vars(dim)
    elif names is not None and not has_names:
        data = data.assign_coords({dim: np.asarray(names, dtype=object)})
    else:
        return source
    return dataclasses.replace(source, data=data)


def fit(runner: Runner, ui: UI, model: DepthDetector, source: ZarrInput) -> Fitted:
    """Fit ``model`` on the input's rows, with progress; return the time and passes taken.

    The passes are counted from the phases that ran, as the phase lines count
    them (robust covariances and the invariant frame included).
    """
    start = time.time()
    label = model._progress_label()
    ui.status(f"{label} on {source.describe()}")
    with runner.progress(label) as progress:
        # The input's orientation is decided when it is opened (--sample-dim, or the API's rule)
        model.fit(source.data, sample_dim=source.sample_dim)
    done = Fitted(time.time() - start, passes_text(progress.counts))
    directions = f"{model.n_directions_} directions, " if model.capabilities.directions else ""
    ui.status(f"fitted in {done.seconds:.1f} s: {directions}certified "
              f"error bound {model.error_bound_:.3g}, {done.passes}")
    return done


def write_depth(runner: Runner, model: DepthDetector, source: ZarrInput, out: SafeOutput,
                contamination: float | None, attrs: dict[str, Any],
                std: bool = False, explain: int | None = None) -> int | None:
    """Score the input and write the depth (outlier flags, standard errors) into the temporary.

    With ``explain``, also each row's ``explain`` least-deep directions and its
    features' contributions (:meth:`daskdepth.DepthDetector.explain`), over the
    sample dimension like the depth (and ``top`` and the feature dimension).

    Returns how many rows were flagged as outliers (None without ``contamination``),
    counted by the same computation that writes them.
    """
    ds = depth_dataset(model, source.data, contamination=contamination, attrs=attrs, std=std)
    if explain is not None:
        ds = ds.merge(model.explain(source.data, n_top=explain,
                                    sample_dim=source.data.dims[0]))
        ds.attrs = dict(attrs)
    if contamination is not None:
        ds.attrs["contamination"] = float(contamination)
        ds.attrs["offset"] = float(ds["outlier"].attrs["offset"])
    else:
        ds.attrs.pop("contamination", None)
        ds.attrs.pop("offset", None)
    flagged: list[int] = []

    def compute(delayed: Any) -> None:
        if contamination is None:
            runner.compute(delayed, "writing")
            return
        _, count = runner.compute((delayed, ds["outlier"].data.sum()), "writing")
        flagged.append(int(count))

    write_store(runner, ds, out, compute=compute)
    return flagged[0] if flagged else None


def write_store(runner: Runner, ds: Any, out: SafeOutput, label: str = "writing",
                compute: Callable[[Any], Any] | None = None) -> None:
    """Write ``ds`` into the output's temporary on the runner (``compute`` runs the write).

    When the write fails or is interrupted, the temporary is removed only once
    no worker can still write to it (:meth:`Runner.compute` waits for them);
    otherwise it is kept, with a lease that stops other jobs from removing it
    while the workers may finish their tasks.
    """
    if runner.remote:
        out.expect_remote_writers()
    try:
        write_dataset(ds, out.path, compute=compute or (lambda d: runner.compute(d, label)))
    except BaseException:
        if runner.stray_writers:
            out.keep("the cluster's workers may still be writing to it (the scheduler did not "
                     "confirm that they stopped)")
        raise


def flagged_text(flagged: int | None, rows: int) -> str:
    """``, 12 rows (1.2%) flagged as outliers`` (empty without flags).

    Examples
    --------
    >>> flagged_text(12, 1000), flagged_text(None, 1000)
    (', 12 of 1,000 rows (1.20%) flagged as outliers', '')
    """
    if flagged is None:
        return ""
    return (f", {flagged:,} of {rows:,} rows ({100 * flagged / max(rows, 1):.2f}%) flagged as "
            "outliers")


# --------------------------------------------------------------------------- score and fit


def run_score(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> ScoreResult:
    """The ``score`` job: fit on INPUT, write the depth of its rows to OUTPUT."""
    prepare_output(args.out, inputs=[args.input], overwrite=args.overwrite)
    source = open_source(args.input, args.array, min_rows=2, sample_dim=args.sample_dim,
                         fill_missing=args.fill_missing_chunks)
    model = make_model(args, draw_seed(args.seed))
    start = time.time()
    with SafeOutput(args.out, overwrite=args.overwrite, inputs=[args.input]) as out, \
            runner(args, ui) as run:
        fitted = fit(run, ui, model, source)
        attrs = job_attrs(model, "score", argv)
        attrs.update(input_attrs(source))
        flagged = write_depth(run, model, source, out, args.contamination, attrs, std=args.std,
                              explain=args.explain)
        target = out.commit()
    return ScoreResult(target, model, time.time() - start, source.shape[0], flagged,
                       fitted.passes)


def cmd_score(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth score INPUT --out OUTPUT``."""
    done = run_score(args, ui, argv)
    ui.result(f"wrote the {str(done.model.depth_name).upper()} depth of {done.rows:,} rows to "
              f"{done.target} in {done.seconds:.1f} s (error bound "
              f"{done.model.error_bound_:.3g}){flagged_text(done.flagged, done.rows)}")
    return 0


def cmd_fit(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth fit INPUT --model MODEL``."""
    prepare_output(args.model, inputs=[args.input], overwrite=args.overwrite)
    source = open_source(args.input, args.array, min_rows=2, sample_dim=args.sample_dim,
                         fill_missing=args.fill_missing_chunks)
    seed = draw_seed(args.seed)
    model = make_model(args, seed)
    with runner(args, ui) as run:
        elapsed = fit(run, ui, model, source).seconds
    metadata = {"command_line": shlex.join(["daskdepth", *argv]),
                "contamination_given": args.contamination is not None, "seed": seed}
    metadata.update(input_attrs(source))
    model._check_loadable()  # what could not be loaded back is refused before any file
    target = _save_fitted(model, args, metadata)
    flags = (f"; 'apply' flags outliers below its offset {model.offset_:.4g} (contamination "
             f"{model.contamination:g})" if args.contamination is not None else
             "; no contamination given, so 'apply' writes outlier flags only with "
             "--contamination")
    ui.result(f"saved the {str(model.depth_name).upper()} model fitted on "
              f"{model.n_samples_fit_:,} rows to {target} ({elapsed:.1f} s, error bound "
              f"{model.error_bound_:.3g}){flags}")
    return 0


def _save_fitted(model: DepthDetector, args: argparse.Namespace,
                 metadata: dict[str, Any]) -> Path:
    """Save a model ``fit`` made; a local MODEL is held as ``update`` holds it.

    ``fit --overwrite`` replaces a model that ``daskdepth update`` may be
    reading, changing and writing back at the same moment: holding the same
    lock (:class:`~daskdepth.storage.atomic.ExclusiveLock`) while saving makes
    the two run one after the other, so that neither's model is replaced
    under the other (an update that held the model first is waited for
    ``--wait`` seconds, then the fit exits with status 3, saving nothing).
    """
    if is_url(args.model):
        return save_model(model, args.model, overwrite=args.overwrite, metadata=metadata)
    try:
        with ExclusiveLock(args.model, wait=args.wait):
            return save_model(model, args.model, overwrite=args.overwrite, metadata=metadata)
    except StoreBusyError as exc:
        raise ModelBusyError(str(exc)) from None


# --------------------------------------------------------------------------- apply


def _metadata(document: dict[str, Any]) -> dict[str, Any]:
    """What ``daskdepth fit`` recorded with a model (its input, seed, command line)."""
    return document.get("metadata", {}) or {}


def _apply_contamination(given: float | None, model: DepthDetector,
                         document: dict[str, Any]) -> float | None:
    """``--contamination``, else the model's own when it was given to ``fit``, else None."""
    if given is None and _metadata(document).get("contamination_given"):
        return float(model.contamination)
    return given


def _apply_attrs(model: DepthDetector, source: ZarrInput, model_path: str,
                 document: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """Attributes of an ``apply`` output: the job's, the model's and its reference's."""
    attrs = job_attrs(model, "apply", argv)
    attrs.update(input_attrs(source))
    attrs["model_path"] = recorded_path(model_path)
    attrs["model_created"] = str(document.get("created", ""))
    metadata = _metadata(document)
    for key in ("input_path", "input_array", "input_shape"):
        if key in metadata:
            attrs[key.replace("input", "reference", 1)] = metadata[key]
    return attrs


def check_model_options(model: DepthDetector, args: argparse.Namespace) -> None:
    """Refuse --std or --explain for a loaded model whose depth lacks them, before any work."""
    name = model.depth_name
    if args.std and not model.capabilities.std:
        raise CommandUsageError(f"--std does not apply to this {name} model: standard errors "
                                f"exist for the depths that are a mean over directions "
                                f"({', '.join(capable('std'))}); leave --std out")
    if args.explain is not None and not model.capabilities.explains:
        raise CommandUsageError(f"--explain does not apply to this {name} model: explanations "
                                f"exist for {', '.join(capable('explains'))}; leave --explain "
                                "out")


def _model_input(model: Any, args: argparse.Namespace) -> Any:
    """The INPUT of ``apply`` and ``drift``, opened and checked against a loaded model
    (``--nan-policy`` set on the model, features matched by name where it has names)."""
    if args.nan_policy is not None:
        model.set_params(nan_policy=args.nan_policy)
    source = open_source(args.input, args.array, sample_dim=args.sample_dim,
                         fill_missing=args.fill_missing_chunks, n_features=model.n_features_in_)
    check_features(model, source, args.model)
    return with_model_features(model, source)


def cmd_apply(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth apply MODEL INPUT --out OUTPUT``."""
    inputs = [args.input, args.model]
    prepare_output(args.out, inputs=inputs, overwrite=args.overwrite)
    try:
        document = read_attributes(args.model)
    except FileNotFoundError as exc:  # a usage error, as a missing INPUT
        raise MissingInputError(str(exc)) from None
    model = load_model(args.model)
    check_model_options(model, args)
    source = _model_input(model, args)
    contamination = _apply_contamination(args.contamination, model, document)
    start = time.time()
    with SafeOutput(args.out, overwrite=args.overwrite, inputs=inputs) as out, \
            runner(args, ui) as run:
        attrs = _apply_attrs(model, source, args.model, document, argv)
        warm_workers(model, model.n_features_in_)  # a cluster's workers compile nothing mid-job
        flagged = write_depth(run, model, source, out, contamination, attrs, std=args.std,
                              explain=args.explain)
        target = out.commit()
    ui.result(f"wrote the {str(model.depth_name).upper()} depth of {source.shape[0]:,} rows to "
              f"{target} in {time.time() - start:.1f} s{flagged_text(flagged, source.shape[0])}")
    return 0


# --------------------------------------------------------------------------- drift


def cmd_drift(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth drift MODEL INPUT [--alpha A]``: exit status 1 when ``p < A``."""
    _saved_model(args.model)
    model = load_model(args.model)
    source = _model_input(model, args)
    with runner(args, ui) as run:
        warm_workers(model, model.n_features_in_)  # a cluster's workers compile nothing mid-job
        test = drift(model, source.data, sample_dim=source.data.dims[0], compute=False)
        result = run.compute(test, "testing")
    drifted = args.alpha is not None and result.drifted(args.alpha)
    verdict = ("" if args.alpha is None else
               f"; drift at level {args.alpha:g}" if drifted else
               f"; no drift at level {args.alpha:g}")
    print(f"Q = {result.q:.4f} (1/2 without drift), std error {result.std_error:.4f}, "
          f"p = {result.p_value:.3g}, n = {result.n_new:,} new rows against "
          f"{result.n_reference:,} reference rows ({result.n_compared:,} reference depths)"
          f"{verdict}")
    return 1 if drifted else 0


# --------------------------------------------------------------------------- update


def _saved_model(path: str) -> None:
    """Refuse (as a usage error) a MODEL path that holds no saved model."""
    if not is_model(path):
        raise MissingInputError(f"{path!r} is not a model saved by 'daskdepth fit'; pass "
                                "the MODEL store that 'daskdepth fit --model MODEL' created")


def cmd_update(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth update MODEL INPUT``: add the rows of INPUT to MODEL, replaced atomically.

    The model is held exclusively (:class:`~daskdepth.storage.atomic.ExclusiveLock`)
    from before it is read until the new one is in place, so two updates of
    one model run one after the other (the second waits ``--wait`` seconds,
    then exits with status 3, nothing changed) and neither loses the other's
    batch.  The new model is written beside the old one and swapped in
    (:class:`~daskdepth.storage.atomic.SafeOutput`): an update killed at any
    moment leaves the old model or the new one, valid.
    """
    if is_url(args.model):
        raise OutputError(f"MODEL {args.model!r} is a URL; 'update' rewrites the model, which "
                          "must be a local path")
    _saved_model(args.model)
    try:
        with ExclusiveLock(args.model, wait=args.wait):
            return _update(args, ui, argv)
    except StoreBusyError as exc:
        raise ModelBusyError(str(exc)) from None


def _update(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """The update itself, the model held: read it, add the batch, write it back."""
    prepare_output(args.model, inputs=[args.input], overwrite=True)  # leftovers, writable
    document = read_attributes(args.model)
    model = load_model(args.model)
    if not model.capabilities.partial_fit:
        raise CommandUsageError(
            f"'update' adds rows to a model whose depth has partial_fit "
            f"({', '.join(capable('partial_fit'))}); {args.model} is a "
            f"{model.depth_name} model: fit it again on the rows it should hold "
            "('daskdepth fit INPUT --model MODEL --overwrite')")
    source = _model_input(model, args)
    start = time.time()
    label = f"updating {str(model.depth_name).upper()}"
    with runner(args, ui) as run:
        ui.status(f"{label} with {source.describe()}")
        warm_workers(model, model.n_features_in_)  # a cluster's workers compile nothing mid-job
        with run.progress(label):
            model.partial_fit(source.data, sample_dim=source.sample_dim)
    metadata = dict(_metadata(document))
    metadata["last_update"] = {"command_line": shlex.join(["daskdepth", *argv]),
                               "created": utc_now(), **input_attrs(source)}
    model._check_loadable()
    target = save_model(model, args.model, overwrite=True, metadata=metadata)
    ui.result(f"updated {target} with {int(model.batch_rows_[-1]):,} rows of "
              f"{source.describe()} in {time.time() - start:.1f} s: n = "
              f"{model.n_samples_fit_:,} rows in {batches_text(model)}, error bound "
              f"{model.error_bound_:.3g}")
    return 0


def batches_text(model: Any) -> str:
    """The batches a streamed model holds: ``3 batches`` or ``the last 2 of 5 batches``.

    Examples
    --------
    >>> import types
    >>> batches_text(types.SimpleNamespace(n_batches_=3, batch_rows_=[1, 2, 3], window=None))
    '3 batches'
    >>> batches_text(types.SimpleNamespace(n_batches_=5, batch_rows_=[1, 2], window=2))
    'the last 2 of 5 batches (window 2)'
    """
    held, added = len(model.batch_rows_), int(model.n_batches_)
    window = getattr(model, "window", None)
    if window is None or held == added:
        return f"{held} batch{'es' if held != 1 else ''}" + (
            f" (window {window})" if window is not None else "")
    return f"the last {held} of {added} batches (window {window})"


# --------------------------------------------------------------------------- info


def cmd_info(args: argparse.Namespace, ui: UI, argv: Sequence[str]) -> int:
    """``daskdepth info PATH``: a saved model, or an output store of daskdepth."""
    if is_model(args.path):
        document = read_attributes(args.path)
        if args.json:
            print(json.dumps({k: document[k] for k in MODEL_INFO_KEYS if k in document},
                             indent=2))
        else:
            print(describe_model(args.path, document))
        return 0
    info = output_info(args.path)
    if info is None:
        raise InputError(f"{args.path!r} is neither a model saved by 'daskdepth fit' nor an "
                         "output of 'daskdepth score' or 'apply'")
    print(json.dumps(info.attrs, indent=2, default=str) if args.json else info.text)
    return 0


def describe_model(path: str, document: dict[str, Any]) -> str:
    """A saved model in a few lines (loading it checks every array)."""
    model = load_model(path)
    lines = [f"daskdepth model {path}",
             f"  estimator:      {document['estimator']} ({model.depth_name})",
             "  parameters:     " + ", ".join(f"{k}={v!r}" for k, v in
                                               model.get_params().items()),
             f"  fitted on:      {model.n_samples_fit_:,} rows x {model.n_features_in_} features",
             *([f"  directions:     {model.n_directions_}"]
               if model.capabilities.directions else []),
             f"  error bound:    {model.error_bound_:.3g}"]
    if _apply_contamination(None, model, document) is not None:
        lines.append(f"  outlier flags:  'apply' writes them: depth below {model.offset_:.6g} "
                     f"(contamination {model.contamination:g})")
    else:
        lines += ["  outlier flags:  none unless 'apply' is given --contamination C (the model "
                  "was fitted without one)",
                  f"  offset_:        {model.offset_:.6g} (for Python's predict(): the default "
                  f"contamination {model.contamination:g})"]
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        lines.append(f"  features:       {', '.join(map(str, names))}")
    if "n_batches_" in vars(model):
        lines.append(f"  batches:        {model.n_samples_fit_:,} rows in "
                     f"{batches_text(model)}")
    metadata = _metadata(document)
    if "input_path" in metadata:
        array = metadata.get("input_array")
        lines.append(f"  reference:      {metadata['input_path']}"
                     + (f" (array {array!r})" if array else ""))
    last = metadata.get("last_update")
    if isinstance(last, dict) and "input_path" in last:
        array = last.get("input_array")
        lines.append(f"  last update:    {last['input_path']}"
                     + (f" (array {array!r})" if array else "")
                     + f", {last.get('created', '?')}")
    lines.append(f"  format version: {document['format_version']}")
    lines.append(f"  saved:          {document.get('created', '?')} by daskdepth "
                 f"{document.get('versions', {}).get('daskdepth', '?')}")
    return "\n".join(printable(line) for line in lines)


def output_info(path: str) -> OutputInfo | None:
    """The attributes and description of a daskdepth output store; None for other stores."""
    if not is_url(path) and not local_path(path).exists():
        raise MissingInputError(f"{path!r} does not exist (info describes a model saved by "
                                "'daskdepth fit' or an output of 'daskdepth score' or 'apply')")
    try:
        ds = open_dataset(path)
    except Exception:  # not a dataset xarray can open: not an output of daskdepth
        return None
    if "depth" not in ds.data_vars or "daskdepth_version" not in ds.attrs:
        return None
    attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ds.attrs.items()}
    lines = [f"daskdepth output {path}",
             "  variables:      " + ", ".join(f"{k} {ds[k].dims}" for k in ds.data_vars),
             f"  rows:           {ds['depth'].shape[0]:,}"]
    lines += [f"  {key + ':':<22}{value}" for key, value in attrs.items() if key != "title"]
    return OutputInfo(attrs, "\n".join(printable(line) for line in lines))
