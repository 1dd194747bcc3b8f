"""A daskdepth job over TLS on localhost, configured with deploy/tls/dask-tls.yaml.

Certificates are made in a temporary directory with deploy/tls/make_certs.py;
the example configuration is used as it is, with its certificate directory
(/etc/dask/tls/) replaced by the temporary one.  The scheduler and the worker
are dask CLI processes reading it through DASK_CONFIG, like the daskdepth
command line; this process reads it with dask.config.
"""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import yaml
import zarr
from conftest import gaussian_data
from distributed import Client
from distributed.security import Security
from proccluster import ProcessCluster, wait_for_workers

import daskdepth

pytest.importorskip("cryptography")

ROOT = Path(__file__).resolve().parents[1]
TLS_CONFIG = ROOT / "deploy" / "tls" / "dask-tls.yaml"
CERT_DIR = "/etc/dask/tls/"
ROWS = 70_000  # more than the in-memory path takes: the distributed passes run

pytestmark = pytest.mark.timeout(300)


def _make_certs_module() -> Any:
    spec = importlib.util.spec_from_file_location("make_certs", ROOT / "deploy/tls/make_certs.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _relocate(node: Any, directory: Path) -> Any:
    if isinstance(node, dict):
        return {k: _relocate(v, directory) for k, v in node.items()}
    if isinstance(node, str) and node.startswith(CERT_DIR):
        return str(directory / node[len(CERT_DIR):])
    return node


def _flatten(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.fixture
def tls_config(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """(DASK_CONFIG directory, flat config) of the example with temporary certificates."""
    certs = tmp_path / "tls"
    paths = _make_certs_module().make_certs(certs)
    assert (paths["ca-key"].stat().st_mode & 0o777) == 0o600
    config = _relocate(yaml.safe_load(TLS_CONFIG.read_text()), certs)
    flat = _flatten(config)
    for key, value in flat.items():
        if key.endswith((".cert", ".key", ".ca-file")):
            assert Path(value).is_file(), f"{key} names {value}, which make_certs did not write"
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "dask-tls.yaml").write_text(yaml.safe_dump(config))
    return config_dir, flat


def test_job_over_tls(tmp_path, tls_config):
    config_dir, flat = tls_config
    x = gaussian_data(ROWS, 2, seed=21)
    store = tmp_path / "x.zarr"
    zarr.create_array(str(store), data=x, chunks=(10_000, 2))
    with dask.config.set(scheduler="threads"):
        base = daskdepth.IRW(n_directions=8, tol=1e-3, random_state=4).fit(x).score_samples(x)

    env = {"DASK_CONFIG": str(config_dir)}
    with ProcessCluster(tmp_path / "cluster", ["--protocol", "tls"], env=env) as pc:
        address = pc.start_scheduler()
        assert address.startswith("tls://")
        pc.add_worker("w0")
        with dask.config.set(flat):
            with Client(address, timeout="20s") as client:
                wait_for_workers(client, 1, pc)
                workers = list(client.scheduler_info(n_workers=-1)["workers"])
                model = daskdepth.IRW(n_directions=8, tol=1e-3, random_state=4)
                xs = da.from_zarr(str(store))
                depth = model.fit(xs).score_samples(xs).compute()
            assert model.n_passes_ >= 1
            assert all(w.startswith("tls://") for w in workers), workers

            # The command line reads the same configuration through DASK_CONFIG.
            out = tmp_path / "depth.zarr"
            proc = subprocess.run(
                [sys.executable, "-m", "daskdepth", "score", str(store), "--out", str(out),
                 "--scheduler", address, "--depth", "irw", "--n-directions", "8",
                 "--tol", "1e-3", "--seed", "4", "--quiet"],
                capture_output=True, text=True, timeout=240,
                env={**pc.env, **env})
            assert proc.returncode == 0, proc.stderr

        # Without the configuration (no certificate), or in clear text, the
        # scheduler is out of reach.  Both are refused at once (no TLS context; the
        # scheduler resets a clear-text connection), so the timeout is generous: a
        # short one fails on a loaded machine before the refusal arrives, with an
        # AssertionError from the client's event-loop start.
        with pytest.raises((OSError, TypeError, ValueError)):
            Client(address, security=Security(), timeout="60s", set_as_default=False)
        # The half-built client is closed now: left to a later garbage collection, its
        # __del__ can run inside the next client's start, which holds the lock of the
        # event loop the clients share, and wait on that lock forever.
        gc.collect()
        plain = address.replace("tls://", "tcp://")
        with pytest.raises(OSError):  # CommClosedError: connection reset by the TLS scheduler
            Client(plain, security=Security(), timeout="60s", set_as_default=False)
        gc.collect()

    np.testing.assert_allclose(depth, base, rtol=0, atol=1e-9)
    with dask.config.set(scheduler="threads"), xr.open_zarr(str(out)) as ds:
        np.testing.assert_allclose(ds["depth"].values, base, rtol=0, atol=1e-9)
