"""Planning and finishing leaves: where to cut sorted values, and the tabulated scores."""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from .routing import PAD


@kernel
def _close_child(out_keys, ch_count, ne, nc, key, rows):
    """Record the open child's rows and the key that ends it; returns the new cursors."""
    out_keys[ne] = key
    ch_count[nc] = rows
    return ne + 1, nc + 1


@kernel
def _cut_weighted(values, weights, i, j, scale, target, last, hi, out_keys, ch_count, ne, nc):
    """Greedy cut of the sorted values ``i .. j - 1`` of one node; see :func:`plan_cuts`."""
    cur = 0.0
    cnt = 0.0
    k = i
    while k < j:
        a = values[k]
        r = k + 1
        while r < j and values[r] == a:
            r += 1
        rows = 0.0
        for q in range(k, r):
            rows += weights[q]
        mass = rows * scale
        heavy = mass > target
        if (heavy or (cur > 0.0 and cur + mass > target)) and a > last and a < hi:
            ne, nc = _close_child(out_keys, ch_count, ne, nc, a, cnt)  # the child below a
            last = a
            cur = 0.0
            cnt = 0.0
        cur += mass
        cnt += rows
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                ne, nc = _close_child(out_keys, ch_count, ne, nc, nxt, cnt)
                last = nxt
                cur = 0.0
                cnt = 0.0
        k = r
    ch_count[nc] = cnt
    return ne, nc + 1


@kernel
def _run_start(values, k, e, a):
    """First index in ``k .. e`` of the run of ``a`` that holds ``e`` (``values`` sorted).

    Gallops back from ``e`` (1, 2, 4, ... values), then bisects: the same index
    as stepping back one value at a time while ``values[i - 1] == a``.
    """
    hi = e  # values[hi] == a
    step = 1
    lo = e - 1
    while lo >= k and values[lo] == a:
        hi = lo
        step *= 2
        lo = hi - step
    lo = max(lo, k - 1)  # lo == k - 1 or values[lo] != a
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if values[mid] == a:
            hi = mid
        else:
            lo = mid
    return hi


@kernel
def _run_end(values, k, j, a):
    """One past the last index below ``j`` of the run of ``a == values[k]`` (``values`` sorted).

    Gallops forward from ``k``, then bisects: the same index as stepping
    forward one value at a time while ``values[r] == a``.
    """
    lo = k  # values[lo] == a
    step = 1
    hi = k + 1
    while hi < j and values[hi] == a:
        lo = hi
        step *= 2
        hi = lo + step
    hi = min(hi, j)  # hi == j or values[hi] != a
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if values[mid] == a:
            lo = mid
        else:
            hi = mid
    return hi


@kernel
def _cut_unit(values, i, j, scale, target, last, hi, out_keys, ch_count, ne, nc):
    """:func:`_cut_weighted` for values of one row each, skipping runs that surely fit.

    In rows, a child takes at most ``lim`` (the most rows of weight ``scale``
    within ``target``).  From a child holding ``cur`` rows, every run that ends
    before position ``k + lim - cur`` fits, so the scan jumps there and only
    examines the run straddling it: about two steps per child, not one per value,
    and finds a long run's ends by galloping (:func:`_run_start`, :func:`_run_end`),
    so that a run of ``L`` tied values costs ``log2(L)`` steps, not ``L``.
    """
    lim = int(min(target / scale, 4e18)) if target >= 0.0 else 0
    while (lim + 1) * scale <= target:
        lim += 1
    while lim > 0 and lim * scale > target:
        lim -= 1
    cur = 0
    k = i
    while k < j:
        e = k + (lim - cur)
        if e >= j:
            cur += j - k
            break
        if e > k:
            r0 = _run_start(values, k, e, values[e])
            cur += r0 - k
            k = r0
        a = values[k]
        r = _run_end(values, k, j, a)
        ln = r - k
        heavy = ln > lim
        if (heavy or (cur > 0 and cur + ln > lim)) and a > last and a < hi:
            ne, nc = _close_child(out_keys, ch_count, ne, nc, a, cur)  # the child below a
            last = a
            cur = 0
        cur += ln
        if heavy:
            nxt = np.nextafter(a, np.inf)
            if nxt < hi:  # the atom's child ends just above it
                ne, nc = _close_child(out_keys, ch_count, ne, nc, nxt, cur)
                last = nxt
                cur = 0
        k = r
    ch_count[nc] = cur
    return ne, nc + 1


@kernel
def plan_cuts(nodes, values, weights, scale, target, lower, upper):
    """Cut leaves into children from their sorted values (greedy, tie-aware).

    ``nodes`` and ``values`` are sorted by (node, value); node ``k`` spans
    ``[lower[k], upper[k])``.  Value ``i`` stands for ``weights[i]`` rows (one
    each when ``weights`` is empty), and a row weighs ``scale`` (rows of the
    data per sampled row).  Distinct values are packed left to right into
    children whose weighted mass stays <= ``target``; a value heavier than
    ``target`` (an atom) gets the child ``[a, nextafter(a))`` of its own, so that
    values missing from a sample cannot land in it.  Returns, for each node with
    more than one child: the node, its child count, the new interior keys (child
    ``k`` holds ``key[k-1] <= p < key[k]``) and the rows of the given values in
    each child (children without values get 0).
    """
    n = values.size
    split_node = np.empty(n, dtype=np.int64)
    split_nch = np.empty(n, dtype=np.int64)
    out_keys = np.empty(2 * n, dtype=np.float64)
    ch_count = np.empty(3 * n, dtype=np.float64)
    unit = weights.size == 0
    ns = 0
    ne = 0
    nc = 0
    i = 0
    while i < n:
        node = nodes[i]
        j = i
        while j < n and nodes[j] == node:
            j += 1
        e0 = ne
        c0 = nc
        if unit:
            ne, nc = _cut_unit(values, i, j, scale, target, lower[node], upper[node], out_keys,
                               ch_count, ne, nc)
        else:
            ne, nc = _cut_weighted(values, weights, i, j, scale, target, lower[node],
                                   upper[node], out_keys, ch_count, ne, nc)
        if nc - c0 > 1:
            split_node[ns] = node
            split_nch[ns] = nc - c0
            ns += 1
        else:
            ne = e0
            nc = c0
        i = j
    return split_node[:ns], split_nch[:ns], out_keys[:ne], ch_count[:nc]


@kernel
def cut_sorted(values, scale, target, out_keys, ch_count):
    """:func:`plan_cuts` of one node spanning every float, into the caller's buffers.

    ``values`` are sorted, one row each, and weigh ``scale`` rows of the data;
    children hold at most ``target`` rows unless they are atoms.  The keys go
    to ``out_keys`` (at least ``2 * values.size`` long) and the rows of each
    child to ``ch_count`` (at least ``3 * values.size + 1``), so that a
    caller cutting many directions allocates them once.  Returns the numbers
    of keys and children written: one child (no key) when the values fit in one.
    """
    if values.size == 0:
        ch_count[0] = 0.0
        return 0, 1
    return _cut_unit(values, 0, values.size, scale, target, -np.inf, np.inf, out_keys,
                     ch_count, 0, 0)


@kernel
def _starts_group(cur, c, cap, first):
    """Whether a leaf of ``c`` rows starts a new merged leaf after ``cur`` rows."""
    return first or cap < 0 or cur + c > cap or c > cap or cur > cap


@kernel
def finish_leaves(cptr, keys, counts, ext, cap, like):
    """Final keys, counts and tabulated scores of a block, from exact leaf counts.

    Three steps in one pass per direction, writing each output once:

    * with ``cap >= 0``, runs of adjacent leaves holding at most ``cap`` rows
      together merge (a leaf heavier than ``cap``, an atom, stays alone; the
      merged leaf keeps the first leaf's lower key and the summed count);
    * the direction's smallest value (``ext[jj, 0]``) and the float above its
      largest (``ext[jj, 1]``) become keys when the end leaves hold rows, so
      that points beyond the data get exact (zero) counts; keys stay sorted,
      as the smallest value lies below the first key when the first leaf
      holds rows, and the largest at or above the last key when the last does;
    * ``lut[k]`` receives ``min(L, G)`` estimated for any point in leaf ``k``:
      ``L`` and ``G`` count the values ``<=`` and ``>=`` it, namely the leaves
      before it, the leaves after it and, of its own leaf, all rows for an
      atom (exact) or half of them (the midpoint, off by at most half).

    ``keys`` are padded (:func:`pad_keys`); counts and ``lut`` get the dtype of
    ``like`` (float32 is exact for them up to 2**23 rows).
    Returns the new bound pointers, padded keys, counts, ``lut`` and each
    direction's largest leaf that is not an atom.
    """
    mb = cptr.size - 1
    # Pass 1: merged leaves and end flags, so that outputs are allocated once.
    n_out = np.zeros(mb, dtype=np.int64)
    head = np.zeros(mb, dtype=np.bool_)
    tail = np.zeros(mb, dtype=np.bool_)
    for jj in range(mb):
        l0 = cptr[jj] + jj
        l1 = cptr[jj + 1] + jj + 1
        cur = 0.0
        groups = 0
        for k in range(l0, l1):
            c = counts[k]
            if _starts_group(cur, c, cap, k == l0):
                if groups == 1:
                    head[jj] = cur > 0
                groups += 1
                cur = 0.0
            cur += c
        if groups == 1:
            head[jj] = cur > 0
        head[jj] = head[jj] and -np.inf < ext[jj, 0] < np.inf
        tail[jj] = cur > 0 and -np.inf < np.nextafter(ext[jj, 1], np.inf) < np.inf
        n_out[jj] = groups + head[jj] + tail[jj]
    new_cptr = np.zeros(mb + 1, dtype=np.int64)
    for jj in range(mb):
        new_cptr[jj + 1] = new_cptr[jj] + n_out[jj] - 1
    new_keys = np.empty(new_cptr[-1] + PAD * mb)
    new_counts = np.empty(new_cptr[-1] + mb, dtype=like.dtype)
    lut = np.empty(new_counts.size, dtype=like.dtype)
    worst = np.zeros(mb)
    # Pass 2: write keys and counts, then tabulate the direction.
    for jj in range(mb):
        l0 = cptr[jj] + jj
        l1 = cptr[jj + 1] + jj + 1
        k0 = cptr[jj] + PAD * jj  # first key of direction jj in ``keys``
        q0 = new_cptr[jj] + PAD * jj  # ... in ``new_keys``
        c0 = new_cptr[jj] + jj  # first leaf in ``new_counts``
        q = q0
        c = c0
        if head[jj]:
            new_keys[q] = ext[jj, 0]
            q += 1
            new_counts[c] = 0.0
            c += 1
        cur = 0.0
        for k in range(l0, l1):
            ck = counts[k]
            if _starts_group(cur, ck, cap, k == l0):
                if k > l0:
                    new_counts[c] = cur
                    c += 1
                    new_keys[q] = keys[k0 + (k - l0) - 1]  # the lower key of leaf k
                    q += 1
                cur = 0.0
            cur += ck
        new_counts[c] = cur
        c += 1
        if tail[jj]:
            new_keys[q] = np.nextafter(ext[jj, 1], np.inf)
            q += 1
            new_counts[c] = 0.0
            c += 1
        for _ in range(PAD):
            new_keys[q] = np.inf
            q += 1
    tabulate_leaves(new_cptr, new_keys, new_counts, lut, worst)
    return new_cptr, new_keys, new_counts, lut, worst


@kernel
def tabulate_leaves(cptr, keys, counts, lut, worst):
    """Fill ``lut`` (per leaf) and ``worst`` (per direction) from the keys and leaf counts.

    ``lut[k]`` is ``min(L, G)`` estimated for any point in leaf ``k``: ``L``
    and ``G`` count the values ``<=`` and ``>=`` it, namely the leaves before
    it, the leaves after it and, of its own leaf, all rows for an atom (exact)
    or half of them (the midpoint, off by at most half).  ``worst[jj]`` is the
    largest leaf of direction ``jj`` that is not an atom (``worst`` starts at
    zero).  Also run on a loaded model, to check its tabulated scores; the
    caller checks the sizes first (``keys`` padded as by :func:`pad_keys`).
    """
    for jj in range(cptr.size - 1):
        q0 = cptr[jj] + PAD * jj  # first key of direction jj
        c0 = cptr[jj] + jj  # its first leaf
        c = cptr[jj + 1] + jj + 1  # one past its last leaf
        total = 0.0
        for k in range(c0, c):
            total += counts[k]
        before = 0.0
        for k in range(c0, c):
            ck = counts[k]
            i = q0 + (k - c0)  # key above leaf k
            atom = k > c0 and k < c - 1 and np.nextafter(keys[i - 1], np.inf) == keys[i]
            own = ck if atom else 0.5 * ck
            lut[k] = min(before + own, total - before - ck + own)
            before += ck
            if not atom:
                worst[jj] = max(worst[jj], ck)


#: Split points of a direction that :func:`recover_counts` tries before refusing
#: (a block this package built has one or two: the leaf at the median may be read
#: from either end).
RECOVER_TRIES = 8


@kernel
def _is_atom(keys, q0, c0, c, k):
    """Whether leaf ``k`` of the direction whose leaves are ``c0 .. c - 1`` is an atom."""
    i = q0 + (k - c0)
    return k > c0 and k < c - 1 and np.nextafter(keys[i - 1], np.inf) == keys[i]


@kernel
def recover_counts(cptr, keys, lut, n, counts):
    """Leaf counts adding up to ``n`` per direction that tabulate to ``lut``, into ``counts``.

    For a block stored without its leaf counts (a fitted summary drops them):
    :func:`tabulate_leaves` sets ``lut[k] = own_k + min(before_k, after_k)``
    (``own_k`` the leaf's rows, or half of them unless it is an atom), so the
    counts follow from ``lut`` read from the left (``before`` known) up to the
    leaf at the median and from the right (``after`` known) beyond it.  Each
    split point where both readings add up to ``n`` is tried, and kept when its
    counts are non-negative and tabulate to ``lut`` exactly (every value a
    multiple of 1/2 below 2**53: exact in float64).  Returns False when no
    split point does (the caller then refuses the block); the caller checks the
    sizes first and tabulates the recovered counts again.
    """
    total = float(n)
    for jj in range(cptr.size - 1):
        q0 = cptr[jj] + PAD * jj
        c0 = cptr[jj] + jj
        c = cptr[jj + 1] + jj + 1
        size = c - c0
        left = np.empty(size)
        right = np.empty(size)
        before = 0.0
        for t in range(size):
            f = 1.0 if _is_atom(keys, q0, c0, c, c0 + t) else 0.5
            left[t] = (lut[c0 + t] - before) / f
            before += left[t]
        after = 0.0
        for t in range(size - 1, -1, -1):
            f = 1.0 if _is_atom(keys, q0, c0, c, c0 + t) else 0.5
            right[t] = (lut[c0 + t] - after) / f
            after += right[t]
        suffix = np.zeros(size + 1)  # suffix[s]: right[s:] added up
        for t in range(size - 1, -1, -1):
            suffix[t] = suffix[t + 1] + right[t]
        found = False
        tries = 0
        prefix = 0.0  # left[:s] added up
        for s in range(size + 1):
            if s:
                prefix += left[s - 1]
            if prefix + suffix[s] != total:
                continue
            tries += 1
            if tries > RECOVER_TRIES:
                break
            ok = True
            before = 0.0
            for t in range(size):
                ck = left[t] if t < s else right[t]
                if not (ck >= 0.0 and ck <= total):
                    ok = False
                    break
                own = ck if _is_atom(keys, q0, c0, c, c0 + t) else 0.5 * ck
                if min(before + own, total - before - ck + own) != lut[c0 + t]:
                    ok = False
                    break
                counts[c0 + t] = ck
                before += ck
            if ok:
                found = True
                break
        if not found:
            return False
    return True
