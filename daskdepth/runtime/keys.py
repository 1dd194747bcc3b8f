"""Task key names: ``daskdepth-<verb>-<token>``, from one tuple of verbs.

The dashboard's task stream, progress bars and spans group tasks by the part
of the key before the token, so each pass shows under its verb.
"""

from __future__ import annotations

#: Every verb of a key this package creates, with the phase it belongs to.
VERBS: dict[str, str] = {
    "wrap": "in-memory input wrapped as a dask array",
    "moments": "moments pass: count, mean, scatter, non-finite rows, row sample",
    "merge": "tree reductions of every pass",
    "subsample": "MCD: the in-memory FastMCD sample",
    "cstep": "MCD: concentration steps over all rows (exact selection of the support)",
    "reweight": "MCD: the reweighting pass",
    "shrinkage": "Ledoit-Wolf: the fourth-moment pass",
    "sample": "the pilot's row sample, shared by the pilot tasks",
    "pilot": "leaf keys planned from the row sample, per direction block",
    "leaves": "a direction block's leaves, shared by the pass tasks",
    "deduplicate": "row chunks centred and their duplicate rows merged, once per pass",
    "histogram": "exact leaf counts of every row chunk and direction block",
    "finish": "light leaves merged and scores tabulated, per direction block",
    "refine": "values of the leaves still too heavy, per row chunk and direction block",
    "split": "heavy leaves split exactly and finished again, per direction block",
    "summary": "the fitted depth summary, shared by the scoring tasks",
    "load": "a direction block of a saved or local summary, placed where scoring reads it",
    "offset": "depths of the row sample that sets offset_",
    "score": "depth of every row, one task per row chunk",
}


def key_name(verb: str, token: str, *more: object) -> str:
    """``daskdepth-<verb>-<token>[-<more>...]``; ``verb`` must be one of :data:`VERBS`.

    Examples
    --------
    >>> key_name("histogram", "3f2a", 0)
    'daskdepth-histogram-3f2a-0'
    """
    if verb not in VERBS:
        raise ValueError(f"unknown key verb {verb!r}; add it to daskdepth.runtime.keys.VERBS")
    return "-".join(["daskdepth", verb, str(token), *(str(m) for m in more)])
