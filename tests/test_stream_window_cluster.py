"""A window too large for its history is refused on a cluster too, where the blocks are handles.

``_check_window`` sized a window's history from the leaves of the blocks held
in this process only: with the summary sharded on a cluster (every block a
handle) it counted no leaf, and a window whose per-batch counts pass
``WINDOW_MAX_BYTES`` was accepted there while refused in memory.  Now the
blocks kept on the workers are asked their leaf count where they are.
"""

from __future__ import annotations

import dask
import pytest
from _stream_helpers import normal_batches
from conftest import chunked

import daskdepth
import daskdepth.estimators.streaming as streaming
import daskdepth.runtime.memory
from daskdepth.summary.streaming import history_bytes

pytestmark = pytest.mark.filterwarnings("ignore::daskdepth.StreamBoundWarning")


def _model() -> daskdepth.IRW:
    return daskdepth.IRW(n_directions=40, tol=0.02, random_state=0, window=3)


def test_too_large_window_is_refused_on_a_sharded_cluster(monkeypatch):
    from distributed import Client, LocalCluster

    from daskdepth.runtime.shards import ClusterBlock

    batches = normal_batches(2, 1500, d=2)
    with dask.config.set(scheduler="threads"):
        local = _model().partial_fit(chunked(batches[0], 500))
    leaves = sum(b.n_leaves for b in local.summary_.blocks)
    assert leaves > 0
    full, without = history_bytes(leaves, 40, 2), history_bytes(0, 40, 2)
    # between the history without the leaves (what was counted on a cluster) and with them
    monkeypatch.setattr(streaming, "WINDOW_MAX_BYTES", 3 * without + 3 * (full - without) // 2)
    with dask.config.set(scheduler="threads"), pytest.raises(ValueError, match="would keep"):
        _model().partial_fit(chunked(batches[0], 500)).partial_fit(chunked(batches[1], 500))
    monkeypatch.setattr(daskdepth.runtime.memory, "REPLICATE_SHARE", 0.0)  # shard them all
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as lc, Client(lc):
        model = _model().partial_fit(chunked(batches[0], 500))
        assert all(isinstance(b, ClusterBlock) for b in model.summary_.blocks)
        with pytest.raises(ValueError, match=r"window=3 would keep .* GiB of batch history"):
            model.partial_fit(chunked(batches[1], 500))
        assert model.n_samples_fit_ == 1500 and model.n_batches_ == 1  # left as it was
        assert streaming.leaf_total(model.summary_) == leaves  # asked where they are
