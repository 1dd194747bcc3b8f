"""Task key names: ``daskdepth-<verb>-<token>``, from one table of verbs; the phases' names.

The dashboard groups tasks by the part of the key before the token (dask's
``key_split``: the leading words made of letters only), here
``daskdepth-<verb>``: the task stream, the groups and the spans all show
``daskdepth-count``.  Its progress panel shows a group's name only up to 15
characters and cuts longer ones to 12 and ``...``, so every verb has at most 5
letters: ``daskdepth-`` plus the verb is always shown whole.
"""

from __future__ import annotations

import uuid

#: Every verb of a key this package creates, with the phase it belongs to.
VERBS: dict[str, str] = {
    "warm": "each worker loads (or compiles) the kernels before a fit's first pass",
    "wrap": "in-memory input wrapped as a dask array",
    "tally": "moments pass: count, mean, scatter, non-finite rows, row sample",
    "merge": "tree reductions of every pass",
    "draw": "MCD: the in-memory FastMCD sample",
    "cstep": "MCD: concentration steps over all rows (exact selection of the support)",
    "weigh": "MCD: the reweighting pass",
    "gauge": "Ledoit-Wolf: the fourth-moment pass",
    "qr": "the R factor of the centred rows (tall-skinny QR) where the covariance looks singular",
    "frame": "AI-IRW's invariant frame: whitened covariance and fourth moments",
    "pick": "the row sample (centred), shared by the pilot or sort tasks",
    "pilot": "leaf keys planned from the row sample, per direction block",
    "sort": "in memory: sorted projections and in-sample counts, per direction block",
    "bin": "a direction block's leaves, shared by the pass tasks",
    "dedup": "row chunks centred and their duplicate rows merged, once per pass",
    "gate": "a shard's task of a row chunk has run: a later chunk may be read",
    "count": ("exact leaf counts of every row chunk and direction block (the projection "
              "depth: counts around each direction's median and MAD)"),
    "build": "light leaves merged and scores tabulated, per direction block",
    "hone": "values of the leaves still too heavy, per row chunk and direction block",
    "split": "heavy leaves split exactly and finished again, per direction block",
    "share": "the fitted depth summary, shared by the scoring tasks",
    "load": "a direction block of a saved or local summary, placed where scoring reads it",
    "cut": "depths of the row sample that set offset_, the outlier cut",
    "score": "depth of every row, one task per row chunk",
    "why": "explanations: each row's least-deep directions and feature contributions",
    "pool": "halfspace mass: the keyed row sample its subsamples are drawn from",
    "feed": "partial_fit: a batch's content-keyed row sample and the updated blocks",
}


#: Every phase of a job (:func:`daskdepth.runtime.client.phase`): what it does, and whether
#: each time it runs it reads every row of the data once (a pass over the data).  The
#: progress displays of the command line and of ``verbose=`` name phases by these names.
PHASES: dict[str, tuple[str, bool]] = {
    "kernels": ("on a cluster, each worker loads the compiled kernels (compiles them where "
                "they are not cached) before the first pass", False),
    "moments": ("count, mean, scatter, non-finite rows and the row sample", True),
    "mcd-subsample": ("MCD: the row sample of FastMCD", True),
    "mcd-fastmcd": ("MCD: FastMCD on the in-memory sample (on this machine, no tasks)", False),
    "cstep": ("MCD: one concentration step (or refinement of its selection) over all rows",
              True),
    "reweight": ("MCD: the reweighting pass", True),
    "shrinkage": ("Ledoit-Wolf: the fourth-moment pass", True),
    "factor": ("the R factor of the centred rows (tall-skinny QR), where the covariance's "
               "rank test drops a direction", True),
    "frame": ("AI-IRW's invariant frame: whitened covariance and fourth moments", True),
    "pool": ("halfspace mass: the row sample its subsamples are drawn from", True),
    "median": ("projection depth: counts that narrow each direction's median", True),
    "mad": ("projection depth: counts that narrow each direction's MAD", True),
    "exact": ("in memory: sorted projections of every row, per direction block", False),
    "pilot": ("leaves planned from the row sample, per direction block", False),
    "histogram": ("exact leaf counts of every row chunk, one wave of direction blocks", True),
    "update": ("partial_fit: a new batch's rows counted into the existing leaves (one pass "
               "over the batch only)", True),
    "refine": ("values of the leaves still too heavy, split exactly", True),
    "offset": ("depths of the row sample that set offset_, the outlier cut", False),
    "score": ("depth of every row of the data scored", True),
}


def check_phase(name: str) -> str:
    """``name`` if it is one of :data:`PHASES`; a phase must be listed there to be shown.

    Examples
    --------
    >>> check_phase("moments")
    'moments'
    >>> check_phase("momentz")
    Traceback (most recent call last):
    ...
    ValueError: unknown phase 'momentz'; add it to daskdepth.runtime.keys.PHASES
    """
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; add it to daskdepth.runtime.keys.PHASES")
    return name


def is_data_pass(name: str) -> bool:
    """Whether each run of the phase ``name`` reads every row of the data once.

    Examples
    --------
    >>> is_data_pass("cstep"), is_data_pass("mcd-fastmcd")
    (True, False)
    """
    return PHASES[check_phase(name)][1]


#: The word before the verb in every key name.
PACKAGE_WORD = "daskdepth"

#: Longest verb: ``daskdepth-`` and the verb fit the progress panel's 15 characters.
MAX_VERB_LETTERS = 5


def task_prefix(verb: str) -> str:
    """The group name of the keys of ``verb`` (dask's ``key_split`` of them).

    Examples
    --------
    >>> task_prefix("count")
    'daskdepth-count'
    """
    if verb not in VERBS:
        raise ValueError(f"unknown key verb {verb!r}; add it to daskdepth.runtime.keys.VERBS")
    return f"{PACKAGE_WORD}-{verb}"


def key_name(verb: str, token: str, *more: object) -> str:
    """``daskdepth-<verb>-<token>[-<more>...]``; ``verb`` must be one of :data:`VERBS`.

    Examples
    --------
    >>> key_name("count", "3f2a", 0)
    'daskdepth-count-3f2a-0'
    """
    return "-".join([task_prefix(verb), str(token), *(str(m) for m in more)])


def is_package_key(key: object) -> bool:
    """Whether a task key (a string or a tuple led by one) was named by :func:`key_name`.

    Group names (:func:`task_prefix`, the scheduler's task prefixes) count too.

    Examples
    --------
    >>> is_package_key(("daskdepth-score-3f2a", 0)), is_package_key("daskdepth-count")
    (True, True)
    >>> is_package_key("sum-3f2a"), is_package_key("daskdepth-demo")
    (False, False)
    """
    name = key[0] if isinstance(key, tuple) and key else key
    if not isinstance(name, str):
        return False
    word, _, rest = name.partition("-")
    return word == PACKAGE_WORD and rest.partition("-")[0] in VERBS


def fresh_token() -> str:
    """A new random token of 12 hex digits, for keys that must never be reused.

    A key reused soon after an earlier job released it could meet that release
    on the scheduler, so keys sent to a cluster as data, and a fit's warm-up,
    get a token of their own.

    Examples
    --------
    >>> len(fresh_token()), fresh_token() != fresh_token()
    (12, True)
    """
    return uuid.uuid4().hex[:12]


def unique_key(name: str, *more: object) -> str:
    """``name[-<more>...]-<fresh token>``: a key of ``name``'s group never used before.

    ``name`` is usually a :func:`key_name`, so the dashboard still shows the
    key in its verb's group.

    Examples
    --------
    >>> key = unique_key(key_name("share", "3f2a"), 0)
    >>> key.startswith("daskdepth-share-3f2a-0-"), is_package_key(key)
    (True, True)
    """
    return "-".join([name, *(str(m) for m in more), fresh_token()])
