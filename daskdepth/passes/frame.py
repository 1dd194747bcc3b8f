"""The frame pass: moments of the whitened rows that fix AI-IRW's invariant frame."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np

from ..kernels.frame import FrameMoments, Support, frame_chunk, frame_merge
from ..runtime.client import phase
from ..runtime.graph import reduce_chunks, row_blocks
from ..runtime.keys import key_name


def frame_pass(x: da.Array, location: np.ndarray, w: np.ndarray, *, rows: bool,
               support: Support | None, token: str, k: int) -> FrameMoments:
    """One pass over the finite rows of ``x`` in whitened coordinates ``(x - location) @ w``.

    Returns the merged :class:`daskdepth.kernels.frame.FrameMoments`: the
    covariance's rows' moments when ``rows`` (all finite rows, or those in
    ``support``) and the fourth- and third-moment sums of all finite rows.
    ``k`` numbers the passes of one fit (keys ``daskdepth-frame-<token>-<k>``).
    """
    blocks, _ = row_blocks(x)
    out = reduce_chunks(blocks, frame_chunk, frame_merge, key=(key_name("frame", token, k),),
                        merge_key=key_name("merge", token, "frame", k),
                        args=(np.ascontiguousarray(location), np.ascontiguousarray(w), rows,
                              support))
    with phase("frame"):
        (result,) = dask.compute(out)
    return result
