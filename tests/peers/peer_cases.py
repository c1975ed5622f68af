"""Generated cases shared by the peer checks (numpy only, so every peer's environment can import it).

Each user has a ranked list without ties (scores strictly decreasing down the list), graded labels
0..3 on a random subset of the catalogue (0 = judged non-relevant), and the cases include on purpose:
users whose judged items are all non-relevant, users with no judged non-relevant item, short lists
(1 to 3 items), lists covering the whole catalogue, and cut-offs larger than both the list and the
catalogue (``CUTOFFS``). Training interactions follow a skewed popularity with some cold items.
"""

from __future__ import annotations

import numpy as np

N_ITEMS = 20
CUTOFFS = (1, 3, 5, 10, 25)


def make_users(seed: int = 0, n_users: int = 40, n_items: int = N_ITEMS, max_grade: int = 3) -> list[dict]:
    """Per user: ``ranked`` (item ids, best first), ``scores`` (dict item -> distinct score, for the
    ranked items), ``labels`` (dict item -> grade 0..max_grade, the judged items), ``full`` (a ranking
    of the whole catalogue that starts with ``ranked``), ``other`` (a second model's ranked list)."""
    rng = np.random.default_rng(seed)
    users = []
    for u in range(n_users):
        full = rng.permutation(n_items).tolist()
        kind = u % 8
        length = {0: n_items, 1: 1, 2: 3, 3: 2}.get(kind, int(rng.integers(4, n_items)))
        ranked = full[:length]
        judged = rng.choice(n_items, size=int(rng.integers(3, 12)), replace=False).tolist()
        grades = rng.integers(0, max_grade + 1, size=len(judged))
        if kind == 4:  # every judged item non-relevant
            grades[:] = 0
        if kind == 5:  # no judged non-relevant item
            grades = np.maximum(grades, 1)
        if kind == 6:  # the top item relevant, so some users do well
            judged[0] = ranked[0]
            grades[0] = max_grade
        labels = {int(i): int(g) for i, g in zip(judged, grades)}
        scores = {int(i): float(length - p) for p, i in enumerate(ranked)}
        keep = int(rng.integers(0, len(ranked) + 1))
        other = ranked[:keep] + [i for i in rng.permutation(n_items).tolist() if i not in ranked[:keep]]
        other = other[: max(1, int(rng.integers(1, n_items + 1)))]
        users.append({"ranked": ranked, "scores": scores, "labels": labels, "full": full, "other": other})
    return users


def make_training(seed: int = 1, n_users: int = 50, n_items: int = N_ITEMS, n_cold: int = 3) -> list[tuple[int, int]]:
    """Distinct (user, item) training pairs with a skewed item popularity; the last ``n_cold`` items
    never occur."""
    rng = np.random.default_rng(seed)
    warm = n_items - n_cold
    p = 1.0 / np.arange(1, warm + 1) ** 1.1
    p /= p.sum()
    pairs = set()
    for u in range(n_users):
        for i in rng.choice(warm, size=int(rng.integers(1, 8)), replace=False, p=p):
            pairs.add((u, int(i)))
    return sorted(pairs)


def user_counts(pairs, n_items: int = N_ITEMS) -> np.ndarray:
    """Number of distinct training users of each item."""
    counts = np.zeros(n_items)
    for _, i in set(pairs):
        counts[i] += 1
    return counts


def make_features(seed: int = 2, n_items: int = N_ITEMS) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Dense features (for cosine), binary features (for Hamming), and 1 to 3 categories of 5 per item."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(n_items, 4))
    binary = (rng.random((n_items, 6)) < 0.4).astype(np.float64)
    cats = [sorted(rng.choice(5, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(n_items)]
    return dense, binary, cats
