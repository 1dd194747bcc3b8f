"""Each estimator class owns its depth: every per-depth list derives from the classes."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import pytest
from conftest import gaussian_data
from sklearn.utils._param_validation import Interval
from test_sklearn_checks import checked_estimators

import daskdepth
from daskdepth.cli import build_parser
from daskdepth.cli.parser import check_options, estimator_params
from daskdepth.estimators import DEPTHS, ESTIMATORS, IRW, make_estimator, registered
from daskdepth.estimators.params import DEFAULT_TOL
from daskdepth.estimators.registry import takers
from daskdepth.io.xarray import model_attrs


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
