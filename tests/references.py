"""Independent numpy references, written from the formulas. Imports nothing of ignite_recsys.

A ranking is a permutation of item indices. ``stable_ranking`` orders by score descending, then
index ascending. ``all_tie_orderings`` enumerates every ordering of tied scores (small rows only),
so a tie-averaged value is the plain mean over them: the definition, not a formula.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def stable_ranking(scores):
    scores = np.asarray(scores, dtype=np.float64)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def all_tie_orderings(scores):
    scores = np.asarray(scores, dtype=np.float64)
    levels = sorted(set(scores.tolist()), reverse=True)
    groups = [[i for i in range(len(scores)) if scores[i] == v] for v in levels]
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield [i for part in parts for i in part]


def gain(r, kind, threshold):
    if r < threshold:
        return 0.0
    if kind == "exp_rank":
        return 2.0**r - 1
    if kind == "linear_rank":
        return float(r)
    if kind == "binary":
        return 1.0
    if kind == "exp_rank_shifted":
        return 2.0 ** (r - threshold + 1) - 1
    return float(kind(r))


def rank_weight(position, discount="log2"):
    """The weight of the 1-based ``position``: 1 / log2(i + 1), 1 / log2(max(i, 2)) (LensKit) or
    a callable's."""
    if discount == "log2":
        return 1.0 / math.log2(position + 1)
    if discount == "log2_clip":
        return 1.0 / math.log2(max(position, 2))
    return float(discount(np.array([float(position)]))[0])


def user_values(
    ranking,
    rel,
    k,
    threshold=1.0,
    gain_kind="exp_rank",
    map_norm="min_k_relevant",
    recall_norm="relevant",
    precision_norm="k",
    discount="log2",
    ndcg_ideal="achievable",
    rbp_persistence=0.8,
    rbp_graded=True,
    err_max_grade=4.0,
    bpref_negative_labels="unjudged",
    judged=None,
):
    """Every metric at cut-off k for one user, given the ranked item indices (the user's
    candidates, best first). ``judged``: the items with a judgement (bpref; None: every item)."""
    rel = np.asarray(rel, dtype=np.float64)
    n = len(rel)
    relevant = [r >= threshold for r in rel]
    num_rel = sum(relevant)
    top = ranking[:k]
    hit_list = [relevant[i] for i in top]
    hits = sum(hit_list)
    out = {}
    dcg = sum(gain(rel[i], gain_kind, threshold) * rank_weight(pos + 1, discount) for pos, i in enumerate(top))
    ideal = sorted(rel, reverse=True)[:k]
    if ndcg_ideal == "achievable":
        idcg = sum(gain(r, gain_kind, threshold) * rank_weight(pos + 1, discount) for pos, r in enumerate(ideal))
    else:  # k items of the user's largest gain
        idcg = gain(max(rel), gain_kind, threshold) * sum(rank_weight(i, discount) for i in range(1, k + 1))
    out["ndcg"] = dcg / idcg if idcg > 0 else 0.0
    out["dcg"] = dcg
    out["hits"] = float(hits)
    p_ = rbp_persistence
    out["rbp"] = (1 - p_) * sum((rel[i] if rbp_graded else 1.0) * relevant[i] * p_**pos for pos, i in enumerate(top))
    err, going_on = 0.0, 1.0
    for pos, i in enumerate(top, start=1):
        stop = (2.0 ** rel[i] - 1) / 2.0**err_max_grade if relevant[i] else 0.0
        err += going_on * stop / pos
        going_on *= 1 - stop
    out["err"] = err
    nonrelevant_candidates = len(ranking) - sum(relevant[i] for i in ranking)
    out["fall_out"] = (len(top) - hits) / nonrelevant_candidates if nonrelevant_candidates else 0.0
    judged_items = range(n) if judged is None else judged
    judged_nonrel = {i for i in judged_items if not relevant[i] and (bpref_negative_labels == "judged" or rel[i] >= 0)}
    fewer = min(num_rel, len(judged_nonrel))
    bpref, above = 0.0, 0
    for i in top:
        if relevant[i]:
            bpref += 1 - min(above, num_rel) / fewer if fewer else 1.0
        elif i in judged_nonrel:
            above += 1
    out["bpref"] = bpref / num_rel if num_rel else 0.0
    out["hit_rate"] = 1.0 if hits > 0 else 0.0
    rden = num_rel if recall_norm == "relevant" else min(k, num_rel)
    out["recall"] = hits / rden if rden else 0.0
    out["precision"] = hits / (k if precision_norm == "k" else min(k, n))
    ap_sum, seen = 0.0, 0
    for pos, h in enumerate(hit_list, start=1):
        if h:
            seen += 1
            ap_sum += seen / pos
    zden = {"min_k_relevant": min(k, num_rel), "relevant": num_rel, "hits": hits, "k": k}[map_norm]
    out["map"] = ap_sum / zden if zden else 0.0
    first = next((pos for pos, h in enumerate(hit_list, start=1) if h), None)
    out["mrr"] = 1.0 / first if first else 0.0
    p, r = hits / k, (hits / num_rel if num_rel else 0.0)
    out["f1"] = 2 * p * r / (p + r) if p + r > 0 else 0.0
    hits_r = sum(relevant[i] for i in ranking[:num_rel])
    out["r_precision"] = hits_r / num_rel if num_rel else 0.0
    return out


def metric_means(scores, rel, top_k, *, ties="stable", ignore_zero_hits=True, threshold=1.0, **kw):
    """Mean over counted users of every metric at every k: {name: [value per k]} and r_precision.
    Every item is a candidate (``candidate_metric_means`` over the full rankings)."""
    scores, rel = np.asarray(scores, np.float64), np.asarray(rel, np.float64)
    rankings = [
        ([stable_ranking(s)] if ties == "stable" else list(all_tie_orderings(s)))
        if not ignore_zero_hits or (y >= threshold).any()
        else None  # users skipped are not ranked
        for s, y in zip(scores, rel)
    ]
    return candidate_metric_means(rankings, rel, top_k, ignore_zero_hits=ignore_zero_hits, threshold=threshold, **kw)


# --- Beyond-accuracy and score-based references (pure Python / numpy from the formulas) --------
def top_lists(scores, k):
    """Each user's top-k item ids (score descending, index ascending)."""
    return [stable_ranking(row)[:k] for row in np.asarray(scores, dtype=np.float64)]


def item_counts(lists, num_items):
    counts = [0] * num_items
    for items in lists:
        for item in items:
            counts[item] += 1
    return counts


def coverage(lists, num_items, convention="recbole"):
    distinct = len({item for items in lists for item in items})
    return distinct / num_items if convention == "recbole" else float(distinct)


def gini(lists, num_items, convention="recbole"):
    c = sorted(item_counts(lists, num_items))
    n, total = num_items, sum(c)
    weighted = sum((2 * (i + 1) - n - 1) * c[i] for i in range(n))
    return weighted / (n * total) if convention == "recbole" else 1 - weighted / ((n - 1) * total)


def entropy(lists, num_items, convention="recbole"):
    c = [x for x in item_counts(lists, num_items) if x > 0]
    total = sum(c)
    if convention == "recbole":
        return -sum(x / total * math.log(x / total) for x in c) / len(c)
    return -sum(x / total * math.log2(x / total) for x in c)


def mean_item_value(lists, value_of):
    return float(np.mean([np.mean([value_of(i) for i in items]) for items in lists]))


def recbole_tail_items(popularity, tail_ratio):
    """RecBole's rule, over a Counter-like dict of the items seen in training."""
    counts = {item: c for item, c in enumerate(popularity) if c > 0}
    if tail_ratio > 1:
        return {item for item, c in counts.items() if c <= tail_ratio}
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return {item for item, _ in ordered[: max(int(len(ordered) * tail_ratio), 1)]}


# --- Input forms: rank only the candidates -----------------------------------------------------
def candidate_rankings(scores=None, excluded=None, ranked_ids=None, ties="stable"):
    """Per user, the rankings of the candidate items (a list of rankings, one per tie order under
    ``ties="average"``). Candidates are the items not excluded: from dense ``scores`` (rows of
    floats, best first by score then index) or from ``ranked_ids`` (rows of ids best first, -1 =
    no item). ``excluded``: per user, a set of item ids."""
    rows = len(scores) if scores is not None else len(ranked_ids)
    excluded = excluded if excluded is not None else [set() for _ in range(rows)]
    out = []
    for u in range(rows):
        if ranked_ids is not None:
            out.append([[int(i) for i in ranked_ids[u] if i >= 0 and int(i) not in excluded[u]]])
            continue
        row = np.asarray(scores[u], dtype=np.float64)
        keep = [i for i in range(len(row)) if i not in excluded[u]]
        if ties == "stable":
            out.append([sorted(keep, key=lambda i: (-row[i], i))])
        else:
            out.append([[keep[j] for j in order] for order in all_tie_orderings(row[keep])])
    return out


def candidate_metric_means(rankings, rel, top_k, *, ignore_zero_hits=True, threshold=1.0, judged_sets=None, **kw):
    """Mean over counted users of every metric at every k, given each user's candidate rankings
    (``candidate_rankings``) and relevance row ``rel`` over the whole catalog: |R| and the ideal
    ranking count every relevant item, candidate or not; positions past the candidates are empty;
    Precision's ``min_k_items`` divides by min(k, number of candidates)."""
    rel = np.asarray(rel, dtype=np.float64)
    totals, counted = {}, 0
    for u, (user_rankings, y) in enumerate(zip(rankings, rel)):
        if ignore_zero_hits and not (y >= threshold).any():
            continue
        counted += 1
        for k in sorted(top_k):
            values = []
            for ranking in user_rankings:
                judged = None if judged_sets is None else judged_sets[u]
                value = user_values(ranking, y, k, threshold, judged=judged, **kw)
                if kw.get("precision_norm") == "min_k_items":
                    hits = sum(y[i] >= threshold for i in ranking[:k])
                    value["precision"] = hits / min(k, len(ranking)) if ranking else 0.0
                values.append(value)
            for name in values[0]:
                totals.setdefault(name, {}).setdefault(k, 0.0)
                totals[name][k] += float(np.mean([v[name] for v in values]))
    if counted == 0:
        return None
    out = {name: [per_k[k] / counted for k in sorted(top_k)] for name, per_k in totals.items()}
    out["r_precision"] = out["r_precision"][0]
    return out


# --- Per-user values (per_user() and the confidence intervals) ------------------------------
def candidate_user_rows(rankings, rel, top_k, *, ignore_zero_hits=True, threshold=1.0, judged_sets=None, **kw):
    """Per user, every metric at every k in ascending order (the mean over the user's tie orders),
    as ``candidate_metric_means`` counts them: {name: array (users, len(top_k))} and
    ``r_precision`` (users,), NaN for the users not counted."""
    rel = np.asarray(rel, dtype=np.float64)
    rows = {}
    for u, (user_rankings, y) in enumerate(zip(rankings, rel)):
        counted = not ignore_zero_hits or (y >= threshold).any()
        per_k = []
        for k in sorted(top_k):
            values = []
            for ranking in user_rankings:
                judged = None if judged_sets is None else judged_sets[u]
                value = user_values(ranking, y, k, threshold, judged=judged, **kw)
                if kw.get("precision_norm") == "min_k_items":
                    hits = sum(y[i] >= threshold for i in ranking[:k])
                    value["precision"] = hits / min(k, len(ranking)) if ranking else 0.0
                values.append(value)
            per_k.append({name: float(np.mean([v[name] for v in values])) for name in values[0]})
        for name in per_k[0]:
            rows.setdefault(name, []).append([v[name] if counted else np.nan for v in per_k])
    out = {name: np.array(values, dtype=np.float64) for name, values in rows.items()}
    out["r_precision"] = out["r_precision"][:, 0]
    return out


def list_value_rows(lists, value_of, top_k):
    """Per user, the mean of ``value_of(item)`` over the first k items of its list, for each k in
    ascending order: array (users, len(top_k)), NaN for a user with an empty list."""
    return np.array(
        [
            [float(np.mean([value_of(i) for i in items[:k]])) if items else np.nan for k in sorted(top_k)]
            for items in lists
        ],
        dtype=np.float64,
    )
