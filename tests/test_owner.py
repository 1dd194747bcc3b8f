"""Each estimator class owns its depth: every per-depth list derives from the classes."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from numbers import Integral
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import gaussian_data
from sklearn.utils._param_validation import Interval
from test_sklearn_checks import checked_estimators

import daskdepth
from daskdepth.cli import build_parser
from daskdepth.cli.parser import check_options, estimator_params
from daskdepth.estimators import (
    DEPTHS,
    ESTIMATORS,
    IRW,
    DepthDetector,
    make_estimator,
    registered,
)
from daskdepth.estimators.base import Capabilities, FittedDepth
from daskdepth.estimators.params import CONSTRAINTS, DEFAULT_TOL
from daskdepth.estimators.registry import takers
from daskdepth.io.xarray import model_attrs
from daskdepth.summary.depth import DepthSummary
from daskdepth.summary.statistics import WHOLE

DOCS_EXT = Path(__file__).resolve().parents[1] / "docs" / "_ext"


class Coarse(IRW):
    """A depth added by a subclass: IRW under another name, with a parameter of its own."""

    depth_name = "coarse-irw"
    display_name = "coarse IRW"
    long_name = "coarse IRW depth"
    _parameter_constraints = {**IRW._parameter_constraints,
                              "coarseness": [Interval(Integral, 1, None, closed="left")]}

    def __init__(self, n_directions=None, tol=DEFAULT_TOL, contamination=0.1,
                 random_state=None, nan_policy="raise", verbose=0, coarseness=1):
        super().__init__(n_directions=n_directions, tol=tol, contamination=contamination,
                         random_state=random_state, nan_policy=nan_policy, verbose=verbose)
        self.coarseness = coarseness


def test_a_registered_class_appears_in_every_list():
    x = gaussian_data(300, 2, seed=1)
    assert "coarse-irw" not in DEPTHS
    with registered(Coarse):
        # the registry, and the classes a saved model may name
        assert DEPTHS["coarse-irw"] is Coarse and ESTIMATORS["Coarse"] is Coarse
        # score(depth=...) and make_estimator
        got = daskdepth.score(x, depth="coarse-irw", n_directions=20, random_state=0)
        np.testing.assert_array_equal(
            got, IRW(n_directions=20, random_state=0).fit(x).score_samples(x))
        assert type(make_estimator("coarse-irw")) is Coarse
        # the command line's --depth, and an option for its own parameter
        args = build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr", "--depth",
                                          "coarse-irw", "--coarseness", "3"])
        check_options(args)
        assert args.depth == "coarse-irw"
        assert estimator_params(args, 1) == {"random_state": 1, "coarseness": 3}
        with pytest.raises(SystemExit):  # its constraints check the option's value
            build_parser().parse_args(["score", "in", "--out", "o", "--coarseness", "0"])
        with pytest.raises(ValueError, match=r"--coarseness 3 does not apply to --depth irw "
                                             r".*use --depth coarse-irw"):
            check_options(build_parser().parse_args(["score", "in", "--out", "o", "--depth",
                                                     "irw", "--coarseness", "3"]))
        assert make_estimator("coarse-irw", coarseness=2).coarseness == 2
        # the scikit-learn checks' list
        assert Coarse in {type(e) for e in checked_estimators()}
        # its names in displays and attributes
        model = Coarse(n_directions=20, random_state=0).fit(x)
        assert model_attrs(model)["long_name"] == "coarse IRW depth"
        assert "coarse IRW" in model._repr_html_()
        # a parameter it does not take names it among the depths, as any other
        assert "coarse-irw" in takers("tol")
    assert "coarse-irw" not in DEPTHS and "Coarse" not in daskdepth.estimators.ESTIMATORS
    with pytest.raises(ValueError, match="depth must be one of .*'projection'"):
        make_estimator("coarse-irw")
    for argv in (["--depth", "coarse-irw"], ["--coarseness", "3"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr", *argv])


def test_a_name_is_taken_once():
    class Other(IRW):
        depth_name = "irw"

    with pytest.raises(ValueError, match="'irw' is already the name of IRW"):
        daskdepth.estimators.register(Other)
    assert DEPTHS["irw"] is IRW


def test_every_depth_declares_what_it_is():
    for name, cls in DEPTHS.items():
        assert cls.depth_name == name and cls.display_name and cls.long_name
        model = cls()
        assert isinstance(model._whitens(), bool)
        assert set(cls._why_not) <= set().union(*(c._get_param_names()
                                                  for c in DEPTHS.values()))
        assert not set(cls._why_not) & set(cls._get_param_names())


@pytest.mark.parametrize("cls", [daskdepth.AIIRW, daskdepth.Halfspace, daskdepth.Projection])
def test_support_fraction_needs_mcd_in_python_as_on_the_command_line(cls):
    """One rule, in the estimator: fit, make_estimator and the CLI refuse alike."""
    extra = {} if cls is daskdepth.AIIRW else {"affine_invariant": True}
    with pytest.raises(daskdepth.ParameterError,
                       match=r"support_fraction=0\.7 applies only with covariance='mcd'"):
        cls(support_fraction=0.7, covariance="sample", **extra).fit(gaussian_data(100, 2))
    with pytest.raises(daskdepth.ParameterError):
        make_estimator(cls.depth_name, support_fraction=0.7, **extra)
    argv = ["score", "in.zarr", "--out", "o.zarr", "--depth", cls.depth_name,
            "--support-fraction", "0.7", *(["--affine-invariant"] if extra else [])]
    with pytest.raises(ValueError, match=r"--support-fraction 0\.7 applies only with "
                                         "--covariance mcd"):
        check_options(build_parser().parse_args(argv))
    cls(support_fraction=0.7, covariance="mcd", **extra)._check_rules()  # the valid pairing


def test_the_command_line_passes_only_what_was_given():
    args = build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr"])
    assert estimator_params(args, 3) == {"random_state": 3}
    args = build_parser().parse_args(["score", "in.zarr", "--out", "o.zarr", "--tol", "0",
                                      "--depth", "halfspace", "--affine-invariant"])
    assert estimator_params(args, None) == {"random_state": None, "tol": 0.0,
                                            "affine_invariant": True}


# ------------------------------------------------------- a depth without directions


@dataclasses.dataclass
class ScaleSummary:
    """The fitted state of :class:`Coordinatewise`: each feature's mean and spread."""

    location: np.ndarray
    scale: np.ndarray
    n: int

    def validate(self) -> None:
        if not (np.isfinite(self.location).all() and (self.scale > 0).all()):
            raise ValueError("location and scale must be finite, scale positive")


def _coordinatewise(block: np.ndarray, location: np.ndarray, scale: np.ndarray,
                    raise_nan: bool) -> np.ndarray:
    finite = np.isfinite(block).all(axis=1)
    if raise_nan and not finite.all():
        raise ValueError("X holds rows with NaN or inf; pass nan_policy='omit'")
    z = (np.where(finite[:, None], block, 0.0) - location) / scale
    return np.where(finite, 1.0 / (1.0 + (z * z).sum(axis=1)), np.nan)


class Coordinatewise(DepthDetector):
    """An exact depth from each feature's mean and spread: no directions, tol or covariance.

    ``1 / (1 + sum_f ((x_f - mean_f) / sd_f)^2)``: the Mahalanobis depth with a
    diagonal scatter, nothing drawn at random.
    """

    depth_name = "coordinatewise"
    display_name = "coordinatewise"
    long_name = "coordinatewise Mahalanobis depth"
    summary_type = ScaleSummary
    summary_types = (ScaleSummary,)
    capabilities = Capabilities()  # none: no directions, tol, covariance, std or explain
    _statistic = WHOLE
    _parameter_constraints = {name: CONSTRAINTS[name]
                              for name in ("contamination", "nan_policy", "verbose")}
    _fitted_attributes = ("n_features_in_", "location_", "scale_", "n_samples_fit_",
                          "error_bound_", "summary_", "_sample_depth", "offset_")
    _optional_fitted_attributes = ("feature_names_in_",)

    def __init__(self, contamination: float = 0.1, nan_policy: str = "raise",
                 verbose: int = 0) -> None:
        self.contamination = contamination
        self.nan_policy = nan_policy
        self.verbose = verbose

    def _fit_model(self, data: Any) -> None:
        x = data.array
        finite = da.isfinite(x).all(axis=1)
        rows = da.where(finite[:, None], x, 0.0)
        n, total, squares = da.compute(finite.sum(), rows.sum(axis=0),
                                       (rows * rows).sum(axis=0))
        location = total / n
        variance = np.maximum(squares / n - location**2, 0.0)
        scale = np.where(variance > 0, np.sqrt(variance), 1.0)
        self.scale_ = scale
        summary = ScaleSummary(location, scale, int(n))
        depth = data.array.map_blocks(_coordinatewise, location, scale,
                                      self.nan_policy == "raise", drop_axis=1,
                                      dtype=np.float64)
        self._set_fitted(FittedDepth(summary=summary, location=location, n=int(n),
                                     error_bound=0.0, passes=0,
                                     sample_depth=np.asarray(depth.compute()),
                                     token=data.content_token))

    def _score(self, data: Any, std: bool = False) -> Any:
        return data.array.map_blocks(_coordinatewise, self.location_, self.scale_,
                                     self.nan_policy == "raise", drop_axis=1,
                                     dtype=np.float64)


def _store(path: Path, x: np.ndarray) -> str:
    zarr.create_array(str(path), data=x, chunks=(100, x.shape[1]))
    return str(path)


def _depth_rows() -> list[list[str]]:
    """The rows of the docs' generated list of depths (docs/_ext/depthlist.py)."""
    sys.path.insert(0, str(DOCS_EXT))
    try:
        return importlib.import_module("depthlist").depth_rows()
    finally:
        sys.path.remove(str(DOCS_EXT))


def test_a_depth_without_directions_tol_or_covariance_works_or_is_refused_everywhere(
        tmp_path):
    from sklearn.utils.estimator_checks import check_estimator
    from test_sklearn_checks import DESIGN

    from daskdepth.cli.main import main
    from daskdepth.storage.codec import MODEL_CLASSES, class_name

    x = gaussian_data(400, 3, seed=2)
    expected = 1.0 / (1.0 + (((x - x.mean(0)) / x.std(0)) ** 2).sum(axis=1))
    with registered(Coordinatewise):
        # the API: score(depth=...) works; what it lacks is refused, naming what to do
        np.testing.assert_allclose(daskdepth.score(x, depth="coordinatewise"), expected,
                                   rtol=1e-12)
        with pytest.raises(daskdepth.ParameterError,
                           match="n_directions=10 does not apply to depth='coordinatewise'"):
            daskdepth.score(x, depth="coordinatewise", n_directions=10)
        with pytest.raises(daskdepth.ParameterError, match="tol=0.001 does not apply"):
            make_estimator("coordinatewise", tol=1e-3)
        model = Coordinatewise().fit(x)
        with pytest.raises(TypeError, match=r"return_std=True does not apply to Coordinatewise"
                                            r".*standard errors exist for ai-irw, irw"):
            model.score_samples(x, return_std=True)
        # explain: refused clearly
        with pytest.raises(TypeError, match="Coordinatewise has no per-direction depths to "
                                            "explain: explanations exist for AIIRW, IRW, "
                                            "Halfspace, Projection"):
            model.explain(x[:2])
        # displays, and the attributes of written depths
        assert "coordinatewise" in model._repr_html_()
        assert "n_directions" not in model_attrs(model)
        # save: refused at save with what to do, before any file; its summary type is
        # among the classes a model may hold while it is registered
        assert MODEL_CLASSES[class_name(ScaleSummary)] is ScaleSummary
        with pytest.raises(TypeError, match="cannot save a Coordinatewise: .* has no "
                                            "directions"):
            model.save(tmp_path / "model.zarr")
        assert not list(tmp_path.iterdir())
        # the command line: the depth and its options; what it lacks refused before any work
        source, out = _store(tmp_path / "in.zarr", x), str(tmp_path / "out.zarr")
        for option, words in ((["--std"], "--std does not apply to --depth coordinatewise"),
                              (["--explain", "2"], "--explain does not apply to --depth "
                                                   "coordinatewise"),
                              (["--n-directions", "10"], "--n-directions 10 does not apply"),
                              (["--tol", "0"], "--tol 0.0 does not apply"),
                              (["--seed", "1"], "--seed does not apply")):
            args = build_parser().parse_args(["score", source, "--out", out, "--depth",
                                              "coordinatewise", *option])
            with pytest.raises(ValueError, match=words):
                check_options(args)
        fit_args = build_parser().parse_args(["fit", source, "--model", out, "--depth",
                                              "coordinatewise"])
        with pytest.raises(ValueError, match="fit saves a model, and a --depth coordinatewise "
                                             "model cannot be saved"):
            check_options(fit_args)
        assert main(["score", source, "--out", out, "--depth", "coordinatewise", "-q",
                     "--scheduler", "synchronous"]) == 0
        written = xr_depth(out)
        np.testing.assert_allclose(written, expected, rtol=1e-12)
        assert "coordinatewise" in build_parser().format_help()
        # the docs' generated list of depths, with its capabilities
        assert ["coordinatewise", "Coordinatewise", "coordinatewise Mahalanobis depth",
                "no", "no", "no", "no", "no"] in _depth_rows()
        # the scikit-learn checks, with the same deliberate departures
        checked = [e for e in checked_estimators() if type(e) is Coordinatewise]
        assert len(checked) == 1
        check_estimator(checked[0], expected_failed_checks=dict(DESIGN))
    # unregistered: gone from every list
    assert "coordinatewise" not in DEPTHS and "Coordinatewise" not in ESTIMATORS
    assert class_name(ScaleSummary) not in MODEL_CLASSES
    assert class_name(DepthSummary) in MODEL_CLASSES
    assert "coordinatewise" not in [row[0] for row in _depth_rows()]
    assert "coordinatewise" not in build_parser().format_help()
    assert Coordinatewise not in {type(e) for e in checked_estimators()}


def xr_depth(path: str) -> np.ndarray:
    import xarray as xr

    with xr.open_zarr(path) as ds:
        return ds["depth"].values


def test_a_capability_is_declared_once_and_checked():
    """A declaration that disagrees with the class is refused at registration."""
    class Wrong(Coordinatewise):
        depth_name = "wrong"
        capabilities = Capabilities(directions=True)

    with pytest.raises(ValueError, match="Wrong declares capabilities.directions=True, but it "
                                         "has no parameter 'n_directions'"):
        daskdepth.estimators.register(Wrong)
    assert "wrong" not in DEPTHS


@pytest.mark.parametrize("depth", ["projection", "halfspace", "halfspace-mass"])
def test_std_is_refused_before_any_work_for_depths_without_standard_errors(tmp_path, depth,
                                                                         capsys):
    from daskdepth.cli.main import main

    # the input does not exist: a refusal of the options comes before any reading
    code = main(["score", str(tmp_path / "missing.zarr"), "--out", str(tmp_path / "o.zarr"),
                 "--depth", depth, "--std"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--std does not apply to --depth {depth}" in err and "(ai-irw, irw)" in err
    assert "Traceback" not in err and not list(tmp_path.iterdir())
