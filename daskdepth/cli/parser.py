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
import re
import textwrap
from collections.abc import Callable
from typing import Any

from .._version import __version__

#: Rows and features of the demo data set.
DEMO_ROWS = 200_000
DEMO_FEATURES = 4
#: Share of planted outliers in the demo data set.
DEMO_OUTLIERS = 0.02

#: Seconds to wait for a scheduler given by --scheduler (dask's connect timeout).
DEFAULT_TIMEOUT = 30.0
#: Where the local cluster's dashboard listens unless --dashboard-address says otherwise.
DEFAULT_DASHBOARD = "127.0.0.1:8787"
#: Where the demo saves its picture unless --picture says otherwise.
DEMO_PICTURE = "daskdepth-demo.png"

USAGE = "daskdepth [-h] [--version] COMMAND ..."

#: The main help's first lines; ``{depths}`` is the registered depths' list (:func:`depth_list`).
DESCRIPTION = """\
{depths}

commands:
  score INPUT --out OUTPUT     fit on INPUT and write the depth of its rows
  fit INPUT --model MODEL      fit on INPUT and save the model
  apply MODEL INPUT --out OUT  score INPUT with a saved model
  drift MODEL INPUT            test whether INPUT has the model's reference distribution
  update MODEL INPUT           add the rows of INPUT to a saved model (partial_fit)
  info PATH                    describe a saved model or an output store
  demo [--out OUTPUT]          run the main job on a generated data set

'daskdepth COMMAND --help' describes a command's options.

INPUT is a Zarr store (format 2 or 3): a single 2-D array (samples x
features), a group with --array NAME, or an xarray dataset with
--array VARIABLE.  OUTPUT opens with xarray.open_zarr as a dataset with
the variable 'depth' over the sample dimension, and a boolean 'outlier'
when a contamination was given (to score or apply, or to fit for apply)."""

EPILOG = """\
exit status: 0 success, 1 the job failed, 2 usage error (bad options, a missing
INPUT or MODEL, an OUTPUT that exists without --overwrite), 3 'update' found its
MODEL held by another update.
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


def _positive(value: float) -> None:
    if value <= 0:
        raise ValueError(f"expected a positive number, got {value:g}")


def _non_negative(value: float) -> None:
    if not 0 <= value < float("inf"):
        raise ValueError(f"expected a finite number >= 0, got {value:g}")


def _unit_interval(value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"expected a number between 0 and 1 (a level such as 0.01), got {value:g}")


#: Protocols of distributed's scheduler addresses.
PROTOCOLS = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def check_scheduler_address(text: str, local: frozenset[str] | set[str] = frozenset()) -> None:
    """Refuse what is neither ``[PROTOCOL://]HOST:PORT`` nor the name of a local scheduler.

    Examples
    --------
    >>> check_scheduler_address("tcp://10.0.0.5:8786")
    >>> check_scheduler_address("bogus", {"threads"})
    Traceback (most recent call last):
    ...
    ValueError: expected the address of a running Dask scheduler, tcp://HOST:PORT (its port, \
8786 by default), or a local scheduler (threads); got 'bogus'
    """
    names = ", ".join(sorted(local))
    problem = (f"expected the address of a running Dask scheduler, tcp://HOST:PORT (its port, "
               f"8786 by default), or a local scheduler ({names}); got {text!r}")
    if text in local:
        return
    protocol, sep, rest = text.partition("://")
    if not sep:
        protocol, rest = "tcp", text
    if protocol not in PROTOCOLS:
        raise ValueError(f"{problem}: unknown protocol {protocol!r} (known: "
                         f"{', '.join(PROTOCOLS)})")
    if protocol == "inproc":
        return
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(problem)


def depth_list(width: int = 72) -> str:
    """The registered depths, as the main help names them, wrapped to ``width`` columns.

    Examples
    --------
    >>> print(depth_list())  # doctest: +NORMALIZE_WHITESPACE
    Distributed data depth over Zarr stores (--depth): ai-irw (AI-IRW depth),
    irw (IRW depth), halfspace (random halfspace (Tukey) depth), halfspace-mass
    (half-space mass), projection (projection depth).
    """
    from ..estimators import DEPTHS  # deferred, as in build_parser

    named = ", ".join(f"{name} ({cls.long_name})" for name, cls in DEPTHS.items())
    return textwrap.fill(f"Distributed data depth over Zarr stores (--depth): {named}.", width)


def _int_or_auto(text: str) -> int | str:
    return text if text == "auto" else int(text)


def only_auto() -> str:
    """The depths whose ``n_directions`` takes 'auto'."""
    from ..estimators import DEPTHS  # deferred, as in build_parser

    return ", ".join(name for name, cls in DEPTHS.items()
                     if any(getattr(c, "options", None) == {"auto"}
                            for c in cls._parameter_constraints.get("n_directions", ())))


def build_parser() -> argparse.ArgumentParser:
    """The ``daskdepth`` argument parser (subcommands score, fit, apply, info, demo).

    The chosen command is ``args.command``.  :func:`parse_command_line` also
    checks the options that depend on each other.

    Examples
    --------
    >>> args = build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr", "--tol", "0"])
    >>> args.command, args.tol, args.depth
    ('score', 0.0, 'ai-irw')
    """
    # deferred: the estimators import Dask; importing the CLI must not (--version)
    from ..covariance.estimate import COVARIANCE_METHODS
    from ..estimators import DEPTHS, check_param
    from ..estimators.base import capable
    from ..estimators.params import DEFAULT_TOL, FRAMES, short_number
    from ..estimators.registry import takers
    from ..runtime.client import LOCAL_SCHEDULERS

    def only(name: str) -> str:
        """The depths that take the parameter ``name``, as a help text's prefix."""
        return ", ".join(takers(name))

    def param(name: str, convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
        return _argument(convert, expected, lambda value: check_param(name, value))

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (no status lines, no progress)")
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true",
                       help="show the full traceback of errors, and distributed's logs")

    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument(
        "--scheduler", metavar="ADDRESS",
        type=_argument(str, "an address",
                       lambda text: check_scheduler_address(text, LOCAL_SCHEDULERS)),
        help="a running Dask scheduler, tcp://HOST:PORT (its port, 8786 by default, not the "
             "dashboard's 8787), or one of Dask's local schedulers ("
             + ", ".join(sorted(LOCAL_SCHEDULERS)) + "); default: a local cluster sized to "
             "this machine")
    cluster.add_argument("--timeout", type=_argument(float, "a number of seconds", _positive),
                         default=DEFAULT_TIMEOUT, metavar="SECONDS",
                         help=f"how long to wait for --scheduler to answer (default: "
                              f"{DEFAULT_TIMEOUT:g})")
    cluster.add_argument("--dashboard-address", default=DEFAULT_DASHBOARD, metavar="HOST:PORT",
                         help=f"where the local cluster's dashboard listens (default: "
                              f"{DEFAULT_DASHBOARD}, this machine only; ':8787' for every "
                              "interface)")

    # Options that set an estimator parameter default to None, passed on only when given:
    # the defaults (and which depth takes which option) are the estimators'.
    fitting = argparse.ArgumentParser(add_help=False)
    fitting.add_argument("--depth", choices=tuple(DEPTHS), default="ai-irw",
                         help="depth notion (default: ai-irw)")
    fitting.add_argument("--n-directions", type=param("n_directions", _int_or_auto,
                                                      "an integer or 'auto'"),
                         metavar="M", help=f"{only('n_directions')}: number of random "
                                           "directions (default: 100 x "
                                           "features, 1000 half-spaces for halfspace-mass; 'auto' "
                                           f"({only_auto()}): enough for a standard error of at "
                                           "most 0.005)")
    fitting.add_argument("--covariance", choices=COVARIANCE_METHODS, metavar="NAME",
                         help=f"{only('covariance')}: covariance estimate of the whitening "
                              "(with --affine-invariant where the depth has it): "
                              + ", ".join(COVARIANCE_METHODS)
                              + " (default: sample; mcd is robust to outliers)")
    fitting.add_argument("--affine-invariant", action="store_true", default=None,
                         help=f"{only('affine_invariant')}: draw the directions whitened by the "
                              "covariance, as AI-IRW does")
    fitting.add_argument("--subsample-size", type=param("subsample_size", int, "an integer"),
                         metavar="PSI", help=f"{only('subsample_size')}: rows per half-space's "
                                             "subsample (default: 32)")
    fitting.add_argument("--scope", type=param("scope", float, "a number"), metavar="LAMBDA",
                         help=f"{only('scope')}: split points within LAMBDA times the "
                              "subsample's range around its middle (default: 0.5)")
    fitting.add_argument("--support-fraction", type=param("support_fraction", float, "a number"),
                         metavar="F",
                         help="share of rows in the raw MCD support, with --covariance mcd "
                              "(default: (n + d + 1) / 2n, as scikit-learn)")
    fitting.add_argument("--tol", type=param("tol", float, "a number"), metavar="T",
                         help=f"{only('tol')}: certified bound on the depth error (default: "
                              f"{short_number(DEFAULT_TOL)}; 0: exact)")
    fitting.add_argument("--seed", type=param("random_state", int, "an integer seed"),
                         metavar="S", help="random seed (default: drawn at random and recorded)")
    nan_policy = argparse.ArgumentParser(add_help=False)
    nan_policy.add_argument("--nan-policy", choices=("raise", "omit"), default=None,
                            help="rows with NaN/inf: fail (raise, the default) or give them NaN "
                                 "depth (omit)")
    fitting.add_argument("--frame", choices=FRAMES,
                         help=f"{only('frame')}: axes of the directions: 'invariant' makes the "
                              "depth affine invariant at any number of directions, for one or "
                              "two more passes (default: correlation)")
    # A parameter of a registered depth without an option above gets one derived from its
    # constraints, so that a new depth's parameters reach the command line too.
    given = {a.dest for p in (fitting, nan_policy) for a in p._actions} | {"contamination"}
    for name in estimator_parameters():
        if name not in given:
            _derived_option(fitting, name)

    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--array", metavar="NAME",
                        help="array (or dataset variable) of a Zarr group to read")
    source.add_argument("--sample-dim", metavar="DIM",
                        help="the dimension of an xarray variable that runs over samples "
                             "(default, as the Python API: the one named 'sample', else the "
                             "one not named 'feature', else the first)")
    source.add_argument("--overwrite", action="store_true",
                        help="replace an existing output")
    source.add_argument("--fill-missing-chunks", action="store_true",
                        help="read missing chunks of INPUT as its fill value instead of failing "
                             "(for stores written without chunks of fill values)")

    def reading(p: argparse.ArgumentParser) -> None:
        """Give ``p`` the options of ``source`` that say how INPUT is read (--array,
        --sample-dim, --fill-missing-chunks): for the commands that write no output
        store (drift, update), which take no --overwrite."""
        for action in source._actions:
            if action.dest in ("array", "sample_dim", "fill_missing_chunks"):
                p._add_action(action)

    # The jobs that write depths: --std adds their standard errors.
    scoring = argparse.ArgumentParser(add_help=False)
    scoring.add_argument("--std", action="store_true",
                         help=f"{', '.join(capable('std'))}: also write 'depth_std', the Monte "
                              "Carlo standard error of each depth over the random directions")
    scoring.add_argument("--explain", type=_argument(int, "a positive integer", _positive),
                         metavar="K", default=None,
                         help="also write each row's K least-deep directions "
                              "('explain_direction', 'explain_depth', 'explain_side') and its "
                              f"features' 'contribution' ({', '.join(capable('explains'))}); "
                              "K beyond the model's number of directions writes them all")

    parser = argparse.ArgumentParser(
        prog="daskdepth", usage=USAGE, description=DESCRIPTION.format(depths=depth_list()),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    # The commands are listed once, in DESCRIPTION, with their arguments.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS,
                                prog="daskdepth")
    sub.required = True

    p = sub.add_parser("score", parents=[common, debug, cluster, fitting, nan_policy, source,
                                         scoring],
                       help="fit on INPUT and write the depth of its rows",
                       description="Fit the depth on INPUT and write the depth of each of its "
                                   "rows to OUTPUT.")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")
    p.add_argument("--contamination", type=param("contamination", float, "a number"),
                   metavar="C", help="share of outliers: also write boolean 'outlier' flags "
                                     "for the C least deep rows (default: no flags)")

    p = sub.add_parser("fit", parents=[common, debug, cluster, fitting, nan_policy, source],
                       help="fit on INPUT and save the model",
                       description="Fit the depth on INPUT and save the model as a Zarr store "
                                   "(arrays and JSON attributes, no pickle).")
    p.add_argument("input", metavar="INPUT", help="Zarr store of reference rows")
    p.add_argument("--model", required=True, metavar="MODEL", help="model store to create")
    # A model holds no depths: --std belongs to the job that scores with it (refused, with
    # that fix, by check_options; hidden from the help).
    p.add_argument("--std", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--explain", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--contamination", type=param("contamination", float, "a number"),
                   metavar="C",
                   help="share of outliers among the reference rows: saved with the model "
                        "with its threshold, so that 'apply' writes 'outlier' flags "
                        "(default: none, and 'apply' writes flags only when given "
                        "--contamination)")
    p.add_argument("--wait", type=_argument(float, "a number of seconds >= 0", _non_negative),
                   metavar="SECONDS", default=0.0,
                   help="when 'daskdepth update' holds MODEL, wait this long for it before "
                        "exiting with status 3 without saving (default: 0, exit at once)")

    p = sub.add_parser("apply", parents=[common, debug, cluster, source, scoring],
                       help="score INPUT with a saved model",
                       description="Write the depth of the rows of INPUT with respect to the "
                                   "reference a saved MODEL was fitted on.")
    p.add_argument("model", metavar="MODEL", help="model saved by 'daskdepth fit'")
    p.add_argument("input", metavar="INPUT", help="Zarr store to score")
    p.add_argument("--out", required=True, metavar="OUTPUT", help="Zarr store to create")
    p.add_argument("--contamination", type=param("contamination", float, "a number"),
                   metavar="C",
                   help="write 'outlier' flags: depth below the threshold that flags this "
                        "share of the reference rows (default: the contamination given to "
                        "'fit', if any; else no flags)")
    p.add_argument("--nan-policy", choices=("raise", "omit"), default=None,
                   help="rows with NaN/inf: fail (raise) or give them NaN depth (omit) "
                        "(default: the model's, as given to 'fit')")

    p = sub.add_parser("drift", parents=[common, debug, cluster],
                       help="test whether INPUT is distributed like a model's reference",
                       description="Compare the rows of INPUT with the reference rows a saved "
                                   "MODEL was fitted on (Liu-Singh quality index Q: 1/2 when "
                                   "they agree, smaller under a location or scale change) and "
                                   "print Q, its standard error, the one-sided p-value and "
                                   "the numbers of rows.  One pass over INPUT.")
    p.add_argument("model", metavar="MODEL", help="model saved by 'daskdepth fit'")
    p.add_argument("input", metavar="INPUT", help="Zarr store of new rows")
    p.add_argument("--alpha", type=_argument(float, "a number in (0, 1)", _unit_interval),
                   metavar="A", default=None,
                   help="exit with status 1 when the p-value is below A (drift), so that a "
                        "pipeline can stop (default: exit 0 whatever the p-value)")
    reading(p)
    p.add_argument("--nan-policy", choices=("raise", "omit"), default=None,
                   help="rows with NaN/inf: fail (raise) or leave them out (omit) "
                        "(default: the model's, as given to 'fit')")

    p = sub.add_parser("update", parents=[common, debug, cluster],
                       help="add the rows of INPUT to a saved model",
                       description="Add the rows of INPUT to a saved MODEL (partial_fit: one "
                                   "pass over INPUT, no earlier row read again) and replace "
                                   "the model atomically: it is written beside the old one and "
                                   "swapped in, so an update stopped at any moment leaves the "
                                   "old model or the new one.  The model is held while it is "
                                   "updated: a second update of it waits --wait seconds, then "
                                   "exits with status 3 and changes nothing.  Prints the rows "
                                   "and batches the model holds and its error bound.  For the "
                                   "depths with partial_fit (" + ", ".join(capable("partial_fit"))
                                   + ").")
    p.add_argument("model", metavar="MODEL", help="model saved by 'daskdepth fit' (replaced)")
    p.add_argument("input", metavar="INPUT", help="Zarr store of new rows")
    reading(p)
    p.add_argument("--nan-policy", choices=("raise", "omit"), default=None,
                   help="rows with NaN/inf: fail (raise) or leave them out (omit) "
                        "(default: the model's, as given to 'fit'; kept in the model)")
    p.add_argument("--wait", type=_argument(float, "a number of seconds >= 0", _non_negative),
                   metavar="SECONDS", default=0.0,
                   help="when another update holds MODEL, wait this long for it before "
                        "exiting with status 3 (default: 0, exit at once)")

    p = sub.add_parser("info", parents=[debug],
                       help="describe a saved model or an output store",
                       description="Print what a saved model or a depth output store holds.")
    p.add_argument("path", metavar="MODEL_OR_OUTPUT",
                   help="a model saved by 'daskdepth fit', or an output of 'daskdepth score' "
                        "or 'apply'")
    p.add_argument("--json", action="store_true", help="print the attributes as JSON")

    p = sub.add_parser(
        "demo", parents=[common, debug, cluster],
        help="run the main job on a generated data set",
        description=f"Score a generated data set ({DEMO_ROWS:,} correlated Gaussian rows x "
                    f"{DEMO_FEATURES} features, {DEMO_OUTLIERS:.0%} of them planted outliers, "
                    "seed 0) with the same code as 'score', report the time, the error "
                    "bound and how well the depth finds the planted outliers, and save a "
                    "picture (with matplotlib: pip install 'daskdepth[plot]').  The first "
                    "run compiles daskdepth's kernels (about 20 s more); later runs reuse "
                    "them.  Nothing is left in the temporary folder.")
    p.add_argument("--out", metavar="OUTPUT",
                   help="keep the depth: Zarr store to create (default: not kept)")
    p.add_argument("--picture", metavar="PNG", default=DEMO_PICTURE,
                   help=f"where to save the picture (default: {DEMO_PICTURE} in the current "
                        "directory, replaced if present)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--rows", type=_argument(int, "a positive integer", _positive),
                   default=DEMO_ROWS, help=argparse.SUPPRESS)
    return parser


#: Parameters the command line sets otherwise (``--seed``, ``--quiet``).
NOT_OPTIONS = frozenset({"random_state", "verbose"})


def estimator_parameters() -> list[str]:
    """Every parameter of a registered depth that an option sets, in a fixed order."""
    from ..estimators import DEPTHS  # deferred, as in build_parser

    names: dict[str, None] = {}
    for cls in DEPTHS.values():
        names.update(dict.fromkeys(cls._get_param_names()))
    return [name for name in names if name not in NOT_OPTIONS]


def _derived_option(parser: argparse.ArgumentParser, name: str) -> None:
    """``--NAME`` for the parameter ``name`` of a registered depth, typed by its constraints."""
    # deferred, as in build_parser (which calls this): scikit-learn and the estimators
    from numbers import Integral

    from sklearn.utils._param_validation import Interval, StrOptions

    from ..estimators import check_param
    from ..estimators.registry import DEPTHS, takers

    owner = next(cls for cls in DEPTHS.values() if name in cls._get_param_names())
    constraints = owner._parameter_constraints.get(name, [])
    flag = "--" + name.replace("_", "-")
    text = f"{', '.join(takers(name))}: {name} (see {owner.__name__}'s documentation)"

    def checked(convert: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
        return _argument(convert, expected, lambda value: check_param(
            name, value, owner.__name__, constraints, hint=f"see {owner.__name__}'s "
                                                          "documentation"))
    if "boolean" in constraints:
        parser.add_argument(flag, action="store_true", default=None, help=text)
    elif any(isinstance(c, StrOptions) for c in constraints):
        options = sorted(set().union(*(c.options for c in constraints
                                       if isinstance(c, StrOptions))))
        parser.add_argument(flag, choices=options, help=text)
    elif any(isinstance(c, Interval) and issubclass(c.type, Integral) for c in constraints):
        parser.add_argument(flag, type=checked(int, "an integer"), help=text)
    elif any(isinstance(c, Interval) for c in constraints):
        parser.add_argument(flag, type=checked(float, "a number"), help=text)


def estimator_params(args: argparse.Namespace, seed: int | None) -> dict[str, Any]:
    """The estimator parameters of the fitting options: only those given, and the seed.

    The defaults are the estimators' own; :func:`daskdepth.estimators.make_estimator`
    refuses an option the depth does not take.
    """
    from ..estimators import DEPTHS  # deferred, as in build_parser

    depth = DEPTHS.get(getattr(args, "depth", None))
    # the seed only to a depth that draws at random (every depth but one without randomness)
    takes_seed = depth is None or "random_state" in depth._get_param_names()
    params: dict[str, Any] = {"random_state": seed} if takes_seed else {}
    for name in estimator_parameters():
        value = getattr(args, name, None)
        if value is not None:
            params[name] = value
    return params


def cli_message(message: str) -> str:
    """A parameter's message with the command line's option names.

    Examples
    --------
    >>> cli_message("support_fraction=0.8 applies only with covariance='mcd'; pass "
    ...             "affine_invariant=True")
    '--support-fraction 0.8 applies only with --covariance mcd; pass --affine-invariant'
    """
    def option(match: re.Match[str]) -> str:
        name, value = match.group(1).replace("_", "-"), match.group(3)
        return f"--{name}" if value == "True" else f"--{name} {value}"
    return re.sub(r"\b([a-z][a-z_]*)=('?)([^'\s,;:()]+)\2", option, message)


def check_options(args: argparse.Namespace) -> None:
    """Refuse options that contradict each other (a ValueError says which and what to do).

    The fitting options must make an estimator
    (:func:`daskdepth.estimators.make_estimator`, which checks the depth's own
    rules), so that a combination the depth cannot use is a usage error before
    any work; its message is given with the option names.

    Examples
    --------
    >>> args = build_parser().parse_args(["score", "x.zarr", "--out", "o.zarr", "--depth", "irw",
    ...                                   "--covariance", "mcd"])
    >>> check_options(args)
    Traceback (most recent call last):
    ...
    ValueError: --covariance mcd does not apply to --depth irw (IRW does not whiten); leave \
it out or use --depth ai-irw or --depth halfspace or --depth projection
    """
    if args.command == "fit" and args.std:
        raise ValueError("--std does nothing for fit (a model holds no depths): pass --std to "
                         "'daskdepth apply MODEL INPUT --out OUTPUT --std', which writes the "
                         "standard errors with the depths")
    if args.command == "fit" and getattr(args, "explain", None) is not None:
        raise ValueError("--explain does nothing for fit (a model holds no rows to explain): "
                         "pass --explain K to 'daskdepth apply MODEL INPUT --out OUTPUT "
                         "--explain K', which writes the explanations with the depths")
    depth = getattr(args, "depth", None)
    if depth is None:  # apply, info, demo: no fitting options
        return
    # deferred: the estimators import Dask (build_parser has loaded them already)
    from ..errors import ParameterError
    from ..estimators import DEPTHS, make_estimator
    from ..estimators.base import capable

    # what the depth cannot do, refused before any work (its class declares what it can)
    capabilities = DEPTHS[depth].capabilities
    if getattr(args, "explain", None) is not None and not capabilities.explains:
        raise ValueError(f"--explain does not apply to --depth {depth}: explanations exist for "
                         "depths built from univariate depths along directions ("
                         f"{', '.join(capable('explains'))}); leave --explain out, or choose "
                         "one of those depths")
    if getattr(args, "seed", None) is not None and \
            "random_state" not in DEPTHS[depth]._get_param_names():
        raise ValueError(f"--seed does not apply to --depth {depth} (it draws nothing at "
                         "random); leave it out")
    why = DEPTHS[depth]._why_not_saved() if args.command == "fit" else None
    if why is not None:
        raise ValueError(f"fit saves a model, and a --depth {depth} model cannot be saved: {why}; "
                         "use 'daskdepth score' instead")
    if getattr(args, "std", False) and not capabilities.std:
        raise ValueError(f"--std does not apply to --depth {depth}: standard errors exist for "
                         f"the depths that are a mean over directions ("
                         f"{', '.join(capable('std'))}); leave --std out, or choose one of "
                         "those depths")

    try:
        # every parameter checked as fit checks it (e.g. --n-directions auto, which not every
        # depth takes), so that no job starts a cluster first
        make_estimator(depth, **estimator_params(args, None))._validate_params()
    except ParameterError as exc:
        raise ValueError(cli_message(str(exc))) from None
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` and check the options together; usage errors exit with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_options(args)
    except ValueError as exc:
        subparser = _subparser(parser, args.command)
        subparser.error(str(exc))
    return args


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command`` (its usage line is the one to print with an error)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    return parser  # pragma: no cover - build_parser always has subcommands
