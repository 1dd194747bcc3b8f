"""``daskdepth update MODEL INPUT``: partial_fit on a saved model, replaced atomically.

An update killed at any moment leaves a model that loads (the old one, or the
new one once it was swapped in); two updates of one model run one after the
other, neither losing the other's batch, or the second exits with status 3
and changes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskdepth
from daskdepth.cli.main import EXIT_BUSY, main
from daskdepth.storage.atomic import LOCK_MARK, TMP_MARK, ExclusiveLock
from daskdepth.storage.modelformat import read_attributes

TOL = 0.02

pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * (1 + 0.1 * seed)


def _store(path: Path, x: np.ndarray) -> str:
    zarr.create_array(str(path), data=x)
    return str(path)


def _points() -> np.ndarray:
    return np.concatenate([_rows(80, 99) * 2, np.full((1, 3), 1e6)])


def _bits(model) -> tuple:
    batches = getattr(model, "batch_rows_", None)
    return (model.score_samples(_points()).tobytes(), model.error_bound_, model.offset_,
            model.n_samples_fit_, getattr(model, "n_batches_", None),
            None if batches is None else batches.tolist())


@pytest.fixture
def saved(tmp_path):
    """A saved IRW model of 400 rows, and the same model in memory."""
    model = daskdepth.IRW(n_directions=12, tol=TOL, random_state=0).fit(_rows(400, 0))
    return model, str(model.save(tmp_path / "m.zarr"))


def _update(*args: str) -> int:
    return main(["update", *args, "--scheduler", "sync"])


def test_update_adds_the_rows_with_the_bits_of_partial_fit(tmp_path, saved, capsys):
    model, path = saved
    for k, n in enumerate((300, 350), 1):
        x = _rows(n, k)
        assert _update(path, _store(tmp_path / f"b{k}.zarr", x)) == 0
        out = capsys.readouterr().out
        model.partial_fit(x)
        assert _bits(daskdepth.load(path)) == _bits(model)
        assert (f"n = {model.n_samples_fit_:,} rows in {k + 1} batches, error bound "
                f"{model.error_bound_:.3g}") in out, out
    assert read_attributes(path)["metadata"]["last_update"]["input_path"].endswith("b2.zarr")
    assert [p.name for p in tmp_path.iterdir() if ".daskdepth-" in p.name] == []


def test_update_keeps_the_window(tmp_path, capsys):
    model = daskdepth.IRW(n_directions=12, tol=TOL, random_state=0, window=2)
    model.partial_fit(_rows(400, 0))
    path = str(model.save(tmp_path / "m.zarr"))
    for k in range(1, 4):
        x = _rows(300 + 10 * k, k)
        assert _update(path, _store(tmp_path / f"b{k}.zarr", x)) == 0
        model.partial_fit(x)
    assert "the last 2 of 4 batches (window 2)" in capsys.readouterr().out
    loaded = daskdepth.load(path)
    assert _bits(loaded) == _bits(model) and loaded.batch_rows_.tolist() == [320, 330]


def test_update_refuses_a_depth_without_partial_fit(tmp_path, capsys):
    path = daskdepth.Projection(n_directions=12, random_state=0).fit(_rows(200, 0)).save(
        tmp_path / "m.zarr")
    before = read_attributes(path)["checksum"]
    assert _update(str(path), _store(tmp_path / "b.zarr", _rows(100, 1))) == 2
    err = capsys.readouterr().err
    assert "'update' adds rows to a model whose depth has partial_fit (ai-irw, irw, " \
           "halfspace)" in err and "is a projection model" in err, err
    assert read_attributes(path)["checksum"] == before


def test_update_usage_errors_exit_2(tmp_path, saved, capsys):
    _, path = saved
    new = _store(tmp_path / "b.zarr", _rows(100, 1))
    assert _update(str(tmp_path / "none.zarr"), new) == 2
    assert "is not a model saved by 'daskdepth fit'" in capsys.readouterr().err
    assert _update(path, str(tmp_path / "none.zarr")) == 2
    assert _update(path, new, "--wait", "-1") == 2
    assert "--wait: expected a finite number >= 0" in capsys.readouterr().err
    assert _update(path, _store(tmp_path / "wide.zarr", np.ones((50, 4)))) == 1  # features
    assert daskdepth.load(path).n_samples_fit_ == 400 and \
        "n_batches_" not in vars(daskdepth.load(path))


def test_an_update_of_a_held_model_exits_3_and_changes_nothing(tmp_path, saved, capsys):
    _, path = saved
    new = _store(tmp_path / "b.zarr", _rows(100, 1))
    before = read_attributes(path)["checksum"]
    with ExclusiveLock(path):  # another update holds the model
        assert _update(path, new) == EXIT_BUSY == 3
        err = capsys.readouterr().err
        assert f"{path!r} is being updated by another job (process {os.getpid()} on" in err
        assert "run again once that job has finished, or wait for it (--wait SECONDS)" in err
        assert _update(path, new, "--wait", "0.3") == 3
        assert "(waited 0.3 s)" in capsys.readouterr().err
    assert read_attributes(path)["checksum"] == before
    assert not [p for p in tmp_path.iterdir() if LOCK_MARK in p.name]
    assert _update(path, new) == 0  # released: the next update runs


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "daskdepth", "update", *args, "--scheduler",
                             "sync", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


@pytest.mark.timeout(600)
def test_two_concurrent_updates_lose_no_batch(tmp_path, saved):
    """Started together, both wait for the model in turn: both batches are in it."""
    model, path = saved
    xa, xb = _rows(300, 1), _rows(350, 2)
    a = _cli(path, _store(tmp_path / "a.zarr", xa), "--wait", "500")
    b = _cli(path, _store(tmp_path / "b.zarr", xb), "--wait", "500")
    for proc in (a, b):
        out, err = proc.communicate(timeout=550)
        assert proc.returncode == 0, err
    loaded = daskdepth.load(path)
    assert loaded.n_batches_ == 3 and sorted(loaded.batch_rows_.tolist()) == [300, 350, 400]
    first, second = (xa, xb) if loaded.batch_rows_.tolist()[1] == 300 else (xb, xa)
    assert _bits(loaded) == _bits(model.partial_fit(first).partial_fit(second))


KILLED = textwrap.dedent("""
    import os, signal, sys
    from daskdepth.storage import atomic
    from daskdepth.cli.main import main
    real = atomic.exchange
    def killed(a, b):
        if sys.argv[1] == "after":
            real(a, b)
        os.kill(os.getpid(), signal.SIGKILL)
    atomic.exchange = killed
    main(["update", sys.argv[2], sys.argv[3], "--scheduler", "sync", "-q"])
""")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_killed_update_leaves_a_model_that_loads(tmp_path, saved, when):
    """SIGKILL with the new model written beside the old one, before or right after the
    swap: the model at MODEL loads, with the old bits or the new ones, and the next
    update removes what the killed one left."""
    model, path = saved
    old = _bits(model)
    x = _rows(300, 1)
    new = _store(tmp_path / "b.zarr", x)
    proc = subprocess.run([sys.executable, "-c", KILLED, when, path, new],
                          capture_output=True, text=True, timeout=500)
    assert proc.returncode == -9, proc.stderr
    left = [p.name for p in tmp_path.iterdir() if TMP_MARK in p.name]
    assert len(left) == 1  # the new model (before the swap) or the old one (after it)
    loaded = daskdepth.load(path)
    if when == "before":  # the old model, as it was
        assert "n_batches_" not in vars(loaded) and _bits(loaded) == old
        expected = model
    else:
        expected = model.partial_fit(x)
        assert _bits(loaded) == _bits(expected) != old
    assert _update(path, _store(tmp_path / "c.zarr", _rows(200, 3))) == 0
    assert _bits(daskdepth.load(path)) == _bits(expected.partial_fit(_rows(200, 3)))
    assert [p.name for p in tmp_path.iterdir() if ".daskdepth-" in p.name] == []


def test_apply_with_an_option_the_model_lacks_is_a_usage_error(tmp_path, capsys):
    """--std on a model whose depth has no standard errors exited 1, as a failed job."""
    path = daskdepth.Projection(n_directions=12, random_state=0).fit(_rows(200, 0)).save(
        tmp_path / "m.zarr")
    new = _store(tmp_path / "b.zarr", _rows(50, 1))
    status = main(["apply", str(path), new, "--out", str(tmp_path / "o.zarr"), "--std",
                   "--scheduler", "sync"])
    err = capsys.readouterr().err
    assert status == 2 and "--std does not apply to this projection model" in err, err
    assert not (tmp_path / "o.zarr").exists()


def test_fit_overwrite_waits_for_an_update_that_holds_the_model(tmp_path, saved, capsys):
    """``fit --overwrite`` takes the update lock while saving: never a model replaced mid-update."""
    _, path = saved
    new = _store(tmp_path / "b.zarr", _rows(300, 2))
    before = read_attributes(path)["checksum"]
    fit = ["fit", new, "--model", path, "--overwrite", "--depth", "irw", "--n-directions",
           "12", "--tol", str(TOL), "--seed", "0", "--scheduler", "sync"]
    with ExclusiveLock(path):  # an update holds the model
        assert main(fit) == EXIT_BUSY
        err = capsys.readouterr().err
        assert "is being updated by another job" in err and "--wait SECONDS" in err
        assert main([*fit, "--wait", "0.3"]) == EXIT_BUSY
    assert read_attributes(path)["checksum"] == before  # nothing saved
    assert not [p for p in tmp_path.iterdir() if LOCK_MARK in p.name]
    assert main(fit) == 0  # released: the refit is saved
    assert daskdepth.load(path).n_samples_fit_ == 300
