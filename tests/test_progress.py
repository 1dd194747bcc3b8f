"""Progress in Python: ``verbose=`` names the phases of a fit, as the command line does.

The phases are named once (:data:`daskdepth.runtime.keys.PHASES`); the
estimators' ``verbose`` and the command line's progress both show those names.
No test depends on timing: times are matched as numbers, never compared.
"""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import dask
import numpy as np
import pytest
from conftest import chunked, gaussian_data

import daskdepth
from daskdepth.runtime.client import phase
from daskdepth.runtime.keys import PHASES, is_data_pass
from daskdepth.runtime.progress import passes_text, show_phases

PACKAGE = Path(daskdepth.__file__).resolve().parent
MODELS = [daskdepth.AIIRW, daskdepth.IRW, daskdepth.Halfspace, daskdepth.HalfspaceMass]
#: "<label>: <phase> started" and "<label>: <phase> done in 1.2 s[, 3 passes over the data]".
STARTED = re.compile(r"fitting [A-Z-]+: ([a-z-]+) started")
DONE = re.compile(r"fitting [A-Z-]+: ([a-z-]+) done in \d+\.\d s(, (\d+) passes over the data)?")
TOTAL = re.compile(r"fitting [A-Z-]+: done in \d+\.\d s, (\d+) pass(es)? over the data \((.*)\)")


def _phase_lines(text: str) -> tuple[list[str], list[str], str]:
    """The phases started, the phases done, and the last line, checking every line's form."""
    lines = text.splitlines()
    started, done = [], []
    for line in lines[:-1]:
        if m := STARTED.fullmatch(line):
            started.append(m.group(1))
        else:
            m = DONE.fullmatch(line)
            assert m, line
            done.append(m.group(1))
    assert TOTAL.fullmatch(lines[-1]), lines[-1]
    return started, done, lines[-1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# --------------------------------------------------------------------------- the parameter


@pytest.mark.parametrize("cls", MODELS)
def test_verbose_is_an_estimator_parameter(cls, tmp_path):
    model = cls()
    assert model.get_params()["verbose"] == 0
    assert model.set_params(verbose=2).verbose == 2
    assert "verbose" in cls._parameter_constraints
    for bad in (-1, 1.5, "yes"):
        with pytest.raises(ValueError, match=r"'verbose' parameter .* 0 \(the default\) prints "
                                             "nothing"):
            cls(verbose=bad).fit(gaussian_data(50, 2))
    # Saved with the model, as every parameter (it changes no result).
    fitted = cls(n_directions=20, random_state=0, verbose=False).fit(gaussian_data(200, 2))
    fitted.set_params(verbose=1)
    loaded = daskdepth.load(fitted.save(tmp_path / "m.zarr"))
    assert loaded.verbose == 1


def test_verbose_changes_no_result(capsys):
    X = gaussian_data(600, 3)
    quiet = daskdepth.AIIRW(random_state=0).fit(X)
    assert capsys.readouterr().out == ""  # verbose=0: silent
    loud = daskdepth.AIIRW(random_state=0, verbose=1).fit(X)
    assert capsys.readouterr().out
    np.testing.assert_array_equal(quiet.score_samples(X), loud.score_samples(X))
    assert quiet.offset_ == loud.offset_


# --------------------------------------------------------------------------- what it prints


def test_verbose_lines_name_every_phase_with_a_local_scheduler(capsys):
    """stdout not a terminal: a line as each phase starts and ends, then the total."""
    x = chunked(gaussian_data(80_000, 3), 10_000)
    with dask.config.set(scheduler="sync"):
        daskdepth.AIIRW(covariance="mcd", tol=1e-3, random_state=0, verbose=1).fit(x)
    out = capsys.readouterr()
    assert out.err == "" and "\r" not in out.out
    started, done, total = _phase_lines(out.out)
    assert started == done  # each phase announced once, and closed
    assert started[:4] == ["moments", "mcd-subsample", "mcd-fastmcd", "cstep"]
    assert {"pilot", "histogram", "offset"} <= set(started) <= set(PHASES)
    # The total counts the passes over the data that the phase lines count.
    cstep = int(re.search(r"cstep done in \S+ s, (\d+) passes over the data", out.out)[1])
    m = TOTAL.fullmatch(total)
    assert f"cstep {cstep}" in m[3] and "moments 1" in m[3]
    assert int(m[1]) == sum(int(k) for k in re.findall(r" (\d+)", m[3]))


def test_verbose_bars_per_phase_on_a_terminal(monkeypatch):
    """On a terminal with a local scheduler, a bar per phase, labelled with it, left on screen."""
    term = _Terminal()
    monkeypatch.setattr("sys.stdout", term)
    with dask.config.set(scheduler="sync"):
        daskdepth.IRW(random_state=0, verbose=1).fit(gaussian_data(500, 2))
    text = term.getvalue()
    *bars, total, end = text.split("\n")
    assert end == "" and TOTAL.fullmatch(total)
    names = []
    for line in bars:  # each phase's line: redrawn bars, the last one full, with its time
        last = line.split("\r")[-1]
        m = re.fullmatch(r"\[#{40}\] \| 100% \| fitting IRW: ([a-z-]+) \| +\d+\.\ds\x1b\[K", last)
        assert m, repr(line)
        names.append(m[1])
    assert names == ["moments", "exact"]


def test_verbose_with_a_distributed_client(capsys):
    """With a distributed Client: a text line per phase (no bar)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster):
        daskdepth.AIIRW(random_state=0, verbose=1, tol=1e-3).fit(
            chunked(gaussian_data(80_000, 2), 20_000))
    out = capsys.readouterr().out
    assert "\r" not in out and "[#" not in out
    started, done, _ = _phase_lines(out)
    # each worker readies its kernels, then the passes
    assert started == done and started[:2] == ["kernels", "moments"] and "histogram" in started


def test_fit_predict_shows_its_scoring(capsys):
    daskdepth.IRW(random_state=0, verbose=1).fit_predict(gaussian_data(300, 2))
    started, _, total = _phase_lines(capsys.readouterr().out)
    assert started[-1] == "score" and "score 1" in total


def test_bars_only_where_they_redraw():
    from daskdepth.runtime.progress import interactive

    notebook = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    assert interactive(_Terminal()) and interactive(notebook())
    assert not interactive(io.StringIO())


def test_show_phases_without_verbose_listens_to_nothing():
    with show_phases("fitting", 0) as progress, phase("moments"):
        pass
    assert progress is None


# --------------------------------------------------------------------------- one list of names


def _phase_literals() -> dict[str, list[str]]:
    """String literals given to ``phase(...)`` in the package, and every string literal."""
    given, literals = [], []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "phase" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                given.append(node.args[0].value)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and path.name != "keys.py":
                literals.append(node.value)
    return {"given": given, "literals": literals}


def test_phase_names_are_declared_once():
    found = _phase_literals()
    assert found["given"] and set(found["given"]) <= set(PHASES)
    # No stale entry: each phase is named somewhere in the package (some through a variable).
    assert set(PHASES) <= set(found["literals"])
    with pytest.raises(ValueError, match="unknown phase 'momentz'; add it to "
                                         r"daskdepth\.runtime\.keys\.PHASES"), phase("momentz"):
        pass


def test_passes_count_the_phases_that_read_every_row():
    assert [name for name in PHASES if not is_data_pass(name)] == [
        "kernels", "mcd-fastmcd", "exact", "pilot", "offset"]
    assert passes_text({"moments": 1, "pilot": 2, "histogram": 2, "refine": 1}) == (
        "4 passes over the data (moments 1, histogram 2, refine 1)")
