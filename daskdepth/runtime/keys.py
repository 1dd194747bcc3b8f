"""Task key names: ``<verb>-daskdepth-<token>``, from one table of verbs.

The dashboard groups tasks by the part of the key before the token (dask's
``key_split``: the leading words made of letters only), here
``<verb>-daskdepth``, and its progress panel shows a group's name only up to
15 characters, cutting longer ones to 12 and ``...``.  So the verb, the word
that tells the passes apart, comes first (every verb has at most 12 letters and
is always shown whole, e.g. ``histogram-da...``), and ``daskdepth`` follows it in
every group name: the task stream, the groups and the spans show
``histogram-daskdepth``.
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
    "frame": "AI-IRW's invariant frame: whitened covariance and fourth moments",
    "sample": "the row sample (centred), shared by the pilot or exact tasks",
    "pilot": "leaf keys planned from the row sample, per direction block",
    "exact": "in memory: sorted projections and in-sample counts, per direction block",
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
    "pool": "halfspace mass: the keyed row sample its subsamples are drawn from",
}


#: The word after the verb in every key name.
PACKAGE_WORD = "daskdepth"


def task_prefix(verb: str) -> str:
    """The group name of the keys of ``verb`` (dask's ``key_split`` of them).

    Examples
    --------
    >>> task_prefix("histogram")
    'histogram-daskdepth'
    """
    if verb not in VERBS:
        raise ValueError(f"unknown key verb {verb!r}; add it to daskdepth.runtime.keys.VERBS")
    return f"{verb}-{PACKAGE_WORD}"


def key_name(verb: str, token: str, *more: object) -> str:
    """``<verb>-daskdepth-<token>[-<more>...]``; ``verb`` must be one of :data:`VERBS`.

    Examples
    --------
    >>> key_name("histogram", "3f2a", 0)
    'histogram-daskdepth-3f2a-0'
    """
    return "-".join([task_prefix(verb), str(token), *(str(m) for m in more)])


def is_package_key(key: object) -> bool:
    """Whether a task key (a string or a tuple led by one) was named by :func:`key_name`.

    Examples
    --------
    >>> is_package_key(("score-daskdepth-3f2a", 0)), is_package_key("sum-3f2a")
    (True, False)
    """
    name = key[0] if isinstance(key, tuple) and key else key
    if not isinstance(name, str):
        return False
    verb, _, rest = name.partition("-")
    return verb in VERBS and rest.startswith(PACKAGE_WORD + "-")
