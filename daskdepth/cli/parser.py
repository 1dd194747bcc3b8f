"""The ``daskdepth`` argument parser: commands, options and their argument types.

Parameter ranges are not written here: every option that sets an estimator
parameter is checked by :func:`daskdepth.estimators.check_param`, so the
command line refuses exactly what ``fit`` would, as a usage error (exit 2).
Importing this module loads nothing but the standard library, so that
``daskdepth --version`` answers at once; :func:`build_parser` loads the
estimators.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._version import __version__

#: Rows and features of the demo data set.
DEMO_ROWS = 200_000
DEMO_FEATURES = 4
#: Share of planted outliers in the demo data set.
DEMO_OUTLIERS = 0.02

DESCRIPTION = """\
Distributed data depth over Zarr stores: AI-IRW, IRW, the random halfspace
(Tukey) depth and the half-space mass (--depth).

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

EPILOG = """\
exit status: 0 success, 1 the job failed, 2 usage error.
Outputs are written to a temporary sibling (OUTPUT.daskdepth-tmp-*) and moved
into place when complete; an existing OUTPUT is replaced only with --overwrite.
With --scheduler ADDRESS, INPUT and OUTPUT must be on storage that the workers
reach under the same path."""


def version_text() -> str:
    """What ``daskdepth --version`` prints."""
    return f"daskdepth {__version__}"


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


def _positive(value: int) -> None:
    if value < 1:
        raise ValueError(f"expected a positive integer, got {value}")


def build_parser() -> argparse.ArgumentParser:
    """The ``daskdepth`` argument parser (subcommands score, fit, apply, info, demo).

    The chosen command is ``args.command``.

    Examples
    --------
    >>> args = build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr", "--tol", "0"])
    >>> args.command, args.tol, args.depth
    ('score', 0.0, 'ai-irw')
    """
    # deferred: the estimators import Dask; importing the CLI must not (--version)
    from ..estimators import DEPTHS, check_param

    def param(name: str, convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
        return _argument(convert, expected, lambda value: check_param(name, value))

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (no status lines, no progress bar)")
    common.add_argument("--debug", action="store_true",
                        help="show the full traceback of errors")

    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument("--scheduler", metavar="ADDRESS",
                         help="address of a running Dask scheduler (e.g. tcp://host:8786); "
                              "the name of one of Dask's local schedulers ('threads', "
                              "'synchronous', 'processes', ...); default: a local cluster sized "
                              "to this machine")

    fitting = argparse.ArgumentParser(add_help=False)
    fitting.add_argument("--depth", choices=tuple(DEPTHS), default="ai-irw",
                         help="depth notion (default: ai-irw)")
    fitting.add_argument("--n-directions", type=param("n_directions", int, "an integer"),
                         metavar="M", help="number of random directions (default: 100 x "
                                           "features; 1000 half-spaces for halfspace-mass)")
    fitting.add_argument("--covariance", default="sample", metavar="NAME",
                         help="covariance estimate for AI-IRW (and halfspace with "
                              "--affine-invariant), as covariance= of daskdepth.AIIRW "
                              "(default: sample)")
    fitting.add_argument("--affine-invariant", action="store_true",
                         help="halfspace: draw the directions whitened by the covariance, as "
                              "AI-IRW does")
    fitting.add_argument("--subsample-size", type=param("subsample_size", int, "an integer"),
                         metavar="PSI", help="halfspace-mass: rows per half-space's subsample "
                                             "(default: 32)")
    fitting.add_argument("--scope", type=param("scope", float, "a number"), metavar="LAMBDA",
                         help="halfspace-mass: split points within LAMBDA times the "
                              "subsample's range around its middle (default: 0.5)")
    fitting.add_argument("--support-fraction", type=param("support_fraction", float, "a number"),
                         metavar="F",
                         help="share of rows in the raw MCD support, with --covariance mcd "
                              "(default: (n + d + 1) / 2n, as scikit-learn)")
    fitting.add_argument("--tol", type=param("tol", float, "a number"), default=1e-4,
                         metavar="T",
                         help="certified bound on the depth error (default: 1e-4; 0: exact; "
                              "not for halfspace-mass, which is exact)")
    fitting.add_argument("--seed", type=param("random_state", int, "an integer seed"),
                         metavar="S", help="random seed (default: drawn at random and recorded)")
    fitting.add_argument("--contamination", type=param("contamination", float, "a number"),
                         metavar="C", help="share of outliers: also write boolean 'outlier' "
                                           "flags")
    fitting.add_argument("--nan-policy", choices=("raise", "omit"), default="raise",
                         help="rows with NaN/inf: fail (raise, default) or give them NaN depth")

    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--array", metavar="NAME",
                        help="array (or dataset variable) of a Zarr group to read")
    source.add_argument("--overwrite", action="store_true",
                        help="replace an existing output")

    parser = argparse.ArgumentParser(
        prog="daskdepth", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("score", parents=[common, cluster, fitting, source],
                       help="fit on INPUT and write the depth of its rows",
                       description="Fit the depth on INPUT and write the depth of each of its "
                                   "rows to OUTPUT.")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")

    p = sub.add_parser("fit", parents=[common, cluster, fitting, source],
                       help="fit on INPUT and save the model",
                       description="Fit the depth on INPUT and save the model as a Zarr store "
                                   "(arrays and JSON attributes, no pickle).")
    p.add_argument("input", metavar="INPUT", help="Zarr store of reference rows")
    p.add_argument("--model", required=True, metavar="MODEL", help="model store to create")

    p = sub.add_parser("apply", parents=[common, cluster, source],
                       help="score INPUT with a saved model",
                       description="Write the depth of the rows of INPUT with respect to the "
                                   "reference a saved MODEL was fitted on.")
    p.add_argument("model", metavar="MODEL", help="model saved by 'daskdepth fit'")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")
    p.add_argument("--contamination", type=param("contamination", float, "a number"),
                   metavar="C",
                   help="write 'outlier' flags for this share of the reference rows (default: "
                        "the contamination given to 'fit', if any)")

    p = sub.add_parser("info", parents=[common],
                       help="describe a saved model or an output store",
                       description="Print what a saved model or a depth output store holds.")
    p.add_argument("path", metavar="MODEL_OR_OUTPUT")
    p.add_argument("--json", action="store_true", help="print the attributes as JSON")

    p = sub.add_parser("demo", parents=[common, cluster],
                       help="run the main job on a built-in data set",
                       description=f"Score a built-in data set ({DEMO_ROWS:,} x {DEMO_FEATURES} "
                                   f"Gaussian rows with {DEMO_OUTLIERS:.0%} planted outliers, "
                                   "seed 0) with the same code as 'score' and report the time, "
                                   "the error bound and how well the depth finds the planted "
                                   "outliers.")
    p.add_argument("--out", metavar="OUTPUT",
                   help="Zarr store to create (default: in a new temporary directory)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--rows", type=_argument(int, "a positive integer", _positive),
                   default=DEMO_ROWS, help=argparse.SUPPRESS)
    return parser
