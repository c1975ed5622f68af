"""Independent numpy references for the metric families, written from each metric's published formula
and the peer libraries' documented definitions. Imports nothing of ignite_recsys and no torch.

Inputs, the same for every function:

* ``ranked``: one user's recommended item ids, best first (any length, possibly shorter than ``k``,
  possibly empty). Only the first ``k`` are read where a function takes ``k``.
* ``relevance``: the user's judgements, either a dict ``{item id: label}`` or a dense vector indexed by
  item id. A label ``>= threshold`` is relevant. For the measures that tell judged from unjudged items
  (bpref) the judged items are the dict's keys, or the non-NaN entries of a dense vector; a dict
  may hold labels of 0 or below (judged non-relevant).
* Training data, where a metric needs it: ``counts`` (a dense vector of per-item popularity, e.g. the
  number of distinct training users of each item), ``n_users`` (number of distinct training users),
  the user's ``history`` (item ids), item ``features`` (rows of a matrix indexed by item id) and item
  ``categories`` (a list, per item id, of its category ids).

Per-user functions return one float; the few global metrics (PopREO, PopRSP, the Gini of exposure,
the exposure share of item groups, torchmetrics' recall at fixed precision) take every user's list.
``tests/peers/CONVENTIONS.md`` records, for each function, which peer library agrees with which
arguments, and what each peer returns for an empty list, a user without relevant items and k larger
than the list.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

# --- Inputs --------------------------------------------------------------------------------------


def labels_of(relevance) -> dict:
    """``{item: label}`` of the judged items: a dict as given, or the non-NaN entries of a dense vector.

    >>> labels_of([0.0, 2.0, float("nan")])
    {0: 0.0, 1: 2.0}
    """
    if isinstance(relevance, Mapping):
        return {int(i): float(v) for i, v in relevance.items()}
    values = np.asarray(relevance, dtype=np.float64)
    return {i: float(v) for i, v in enumerate(values) if not np.isnan(v)}


def relevant_set(relevance, threshold: float = 1.0) -> set:
    """The items whose label is ``>= threshold``."""
    return {i for i, v in labels_of(relevance).items() if v >= threshold}


def _top(ranked: Sequence[int], k: int | None) -> list:
    items = [int(i) for i in ranked]
    return items if k is None else items[:k]


# --- Gains and rank weights ----------------------------------------------------------------------


def gain_value(label: float, gain: str = "exp", threshold: float = 1.0) -> float:
    """Gain of one label: ``"exp"`` 2^rel - 1 (Burges et al. 2005, ranx ``dcg_burges``), ``"linear"``
    rel (Järvelin & Kekäläinen 2002, ranx ``dcg``), ``"binary"`` 1. A label below ``threshold`` gains 0
    (ranx drops qrels under ``rel_lvl`` before it looks an item up)."""
    if label < threshold:
        return 0.0
    if gain == "exp":
        return 2.0**label - 1.0
    if gain == "linear":
        return float(label)
    if gain == "binary":
        return 1.0
    raise ValueError(f"gain must be 'exp', 'linear' or 'binary', got {gain!r}")


def rank_weights(n: int, discount="log2") -> np.ndarray:
    """Weights of ranks 1..n (multiplied into the gains).

    * ``"log2"``: 1 / log2(i + 1), the NDCG discount of Burges et al. and of ranx, trec_eval, RecTools.
    * ``"log2_clip"``: 1 / log2(max(i, 2)), so ranks 1 and 2 both weigh 1: Järvelin & Kekäläinen's
      original clip and LensKit 2025's default ``LogRankWeight()`` (lenskit/metrics/ranking/_weighting.py).
    * ``("geometric", p)``: p^(i-1), the RBP user model (Moffat & Zobel 2008), LensKit's
      ``GeometricRankWeight(p)``.
    * a callable taking the ranks (int array starting at 1) and returning the weights.

    >>> rank_weights(3, "log2_clip").round(4).tolist()
    [1.0, 1.0, 0.6309]
    """
    ranks = np.arange(1, n + 1, dtype=np.float64)
    if callable(discount):
        return np.asarray(discount(ranks.astype(np.int64)), dtype=np.float64)
    if discount == "log2":
        return 1.0 / np.log2(ranks + 1.0)
    if discount == "log2_clip":
        return 1.0 / np.log2(np.maximum(ranks, 2.0))
    if isinstance(discount, tuple) and discount[0] == "geometric":
        return float(discount[1]) ** (ranks - 1.0)
    raise ValueError(f"unknown discount {discount!r}")


# --- Ranking metrics -----------------------------------------------------------------------------


def dcg(ranked, relevance, k: int, *, gain: str = "exp", discount="log2", threshold: float = 1.0) -> float:
    """Unnormalised DCG@k = sum_{i<=min(k,|L|)} g(rel_i) w(i).

    Source: Järvelin & Kekäläinen, TOIS 2002 (linear gain), Burges et al., ICML 2005 (2^rel - 1).
    ``gain="linear"`` equals ranx ``dcg@k``, ``gain="exp"`` ranx ``dcg_burges@k`` (ranx/metrics/ndcg.py).

    >>> round(dcg([3, 1, 2], {1: 2, 2: 1}, 3, gain="linear"), 6)  # 2/log2(3) + 1/log2(4)
    1.76186
    """
    labels = labels_of(relevance)
    top = _top(ranked, k)
    w = rank_weights(len(top), discount)
    return float(sum(gain_value(labels.get(i, 0.0), gain, threshold) * w[p] for p, i in enumerate(top)))


def ideal_dcg(
    relevance, k: int, *, gain: str = "exp", discount="log2", threshold: float = 1.0, ideal: str = "achievable"
) -> float:
    """The normaliser of NDCG@k.

    * ``ideal="achievable"``: the DCG of the user's own judged items sorted by gain, cut at k (trec_eval,
      ranx, torchmetrics, LensKit, RecTools ``divide_by_achievable=True``).
    * ``ideal="k_relevant"``: sum_{i=1..k} w(i), the DCG of k items of gain 1, whatever the user's number
      of relevant items (RecTools ``NDCG(divide_by_achievable=False)``, its default). Binary gain only.
    """
    if ideal == "k_relevant":
        if gain != "binary":
            raise ValueError("ideal='k_relevant' assumes k items of gain 1: use gain='binary'")
        return float(rank_weights(k, discount).sum())
    if ideal != "achievable":
        raise ValueError(f"ideal must be 'achievable' or 'k_relevant', got {ideal!r}")
    gains = sorted((gain_value(v, gain, threshold) for v in labels_of(relevance).values()), reverse=True)[:k]
    w = rank_weights(len(gains), discount)
    return float(np.dot(gains, w)) if gains else 0.0


def ndcg(
    ranked,
    relevance,
    k: int,
    *,
    gain: str = "exp",
    discount="log2",
    threshold: float = 1.0,
    ideal: str = "achievable",
    empty: float = 0.0,
) -> float:
    """NDCG@k = DCG@k / IDCG@k; ``empty`` when the ideal DCG is 0 (no relevant item).

    ranx and trec_eval give 0 to such a user (``empty=0.0``); LensKit gives NaN (the user drops out of
    its mean); RecTools has no such user (its users come from the test interactions).

    >>> round(ndcg([0, 1, 2], {2: 1, 3: 1}, 3, gain="binary"), 4)           # 0.5 / (1 + 1/log2(3))
    0.3066
    >>> round(ndcg([0, 1, 2], {2: 1, 3: 1}, 3, gain="binary", ideal="k_relevant"), 4)
    0.2346
    >>> round(ndcg([0, 1, 2], {2: 1, 3: 1}, 3, gain="binary", discount="log2_clip"), 4)
    0.3155
    """
    idcg = ideal_dcg(relevance, k, gain=gain, discount=discount, threshold=threshold, ideal=ideal)
    if idcg == 0:
        return empty
    return dcg(ranked, relevance, k, gain=gain, discount=discount, threshold=threshold) / idcg


def rbp(
    ranked,
    relevance,
    p: float,
    k: int | None = None,
    *,
    graded: bool = True,
    threshold: float = 1.0,
    normalize: str = "series",
) -> float:
    """Rank-biased precision (Moffat & Zobel, TOIS 2008): RBP = (1 - p) sum_i r_i p^(i-1) over the first k.

    * ``graded=True``: r_i is the raw label when it is ``>= threshold``, else 0, as ranx ``rbp.p`` does
      (ranx/metrics/rank_biased_precision.py reads the qrels value, so a label of 3 counts 3 times and
      RBP can exceed 1; ranx also reads the whole run: pass ``k=None`` or cut the run yourself).
      ``graded=False``: r_i = 1 for a relevant item (Moffat & Zobel; LensKit ``RBP``).
    * ``normalize="series"``: divide sum_i r_i p^(i-1) by the series sum 1/(1-p) (the formula above).
      ``normalize="achievable"``: divide by sum_{i<=min(|R|, |L_k|)} p^(i-1), the best value with the
      user's relevant items and this list's length (LensKit ``RBP(normalize=True)``); 0/0 gives NaN.

    >>> round(rbp([5, 6, 7], {6: 1, 7: 3}, 0.5), 4)   # 0.5 * (0.5 + 3 * 0.25)
    0.625
    """
    labels = labels_of(relevance)
    top = _top(ranked, k)
    w = rank_weights(len(top), ("geometric", p))
    r = [(labels.get(i, 0.0) if graded else 1.0) if labels.get(i, -math.inf) >= threshold else 0.0 for i in top]
    total = float(np.dot(r, w)) if top else 0.0
    if normalize == "series":
        return (1.0 - p) * total
    if normalize == "achievable":
        n = min(len(relevant_set(relevance, threshold)), len(top))
        best = float(w[:n].sum())
        return total / best if best > 0 else math.nan
    raise ValueError(f"normalize must be 'series' or 'achievable', got {normalize!r}")


def bpref(ranked, judgements, *, threshold: float = 1.0, convention: str = "trec_eval") -> float:
    """bpref (Buckley & Voorhees, SIGIR 2004) as trec_eval computes it (m_bpref.c) over the whole list:

        bpref = (1/R) sum_{relevant r retrieved} (1 - min(n_r, R) / min(R, N))

    R = number of judged relevant items (label >= threshold), N = number of judged non-relevant items,
    n_r = judged non-relevant items retrieved above r; unjudged retrieved items are ignored; R = 0 gives 0.
    Judged: a key of the dict / a non-NaN entry, with two conventions:

    * ``convention="trec_eval"``: a negative label counts as unjudged (trec_eval's qrels levels start at
      0), labels in [0, threshold) are judged non-relevant; with N = 0 no judged non-relevant item can
      precede r and each retrieved relevant item adds 1.
    * ``convention="ranx"``: every label below the threshold, negative ones included, is judged
      non-relevant (ranx/metrics/bpref.py); with N = 0 ranx divides 0 by min(R, 0) = 0 for each retrieved
      relevant item, so it returns NaN when one is retrieved and 0 when none is.

    >>> round(bpref([1, 9, 2, 3], {1: 0, 2: 1, 3: 1, 4: 0}), 4)   # (1 - 1/2) + (1 - 1/2), over R=2
    0.5
    >>> bpref([1, 2], {1: -1, 2: 1}), bpref([1, 2], {1: -1, 2: 1}, convention="ranx")
    (1.0, 0.0)
    """
    if convention not in ("trec_eval", "ranx"):
        raise ValueError(f"convention must be 'trec_eval' or 'ranx', got {convention!r}")
    labels = labels_of(judgements)
    if convention == "trec_eval":
        labels = {i: v for i, v in labels.items() if v >= 0}
    n_rel = sum(v >= threshold for v in labels.values())
    n_non = sum(v < threshold for v in labels.values())
    if n_rel == 0:
        return 0.0
    total, nonrel_above = 0.0, 0
    for i in _top(ranked, None):
        if i not in labels:
            continue
        if labels[i] >= threshold:
            total += 1.0 if nonrel_above == 0 else 1.0 - min(nonrel_above, n_rel) / min(n_rel, n_non)
        else:
            nonrel_above += 1
    if n_non == 0 and convention == "ranx" and total > 0:
        return math.nan
    return total / n_rel


def fall_out(
    ranked, relevance, candidates: Iterable[int], k: int, *, threshold: float = 1.0, empty: float = 0.0
) -> float:
    """Fall-out@k = |non-relevant items in the top k| / |non-relevant candidates| (torchmetrics
    ``RetrievalFallOut``: the non-relevant items are every scored candidate of the user whose label is
    below the threshold, labelled or not). ``empty`` when the user has no non-relevant candidate:
    torchmetrics' functional ``retrieval_fall_out`` returns 0, the class's default
    ``empty_target_action="pos"`` gives 1.0 (and ``"skip"`` drops the user).

    >>> fall_out([0, 1, 2], {0: 1}, range(6), 2)   # item 1 is the only non-relevant in the top 2; 5 in all
    0.2
    """
    rel = relevant_set(relevance, threshold)
    nonrel = {int(i) for i in candidates} - rel
    if not nonrel:
        return empty
    return sum(i in nonrel for i in _top(ranked, k)) / len(nonrel)


def err(ranked, relevance, k: int, *, max_grade: float = 4.0, threshold: float = 1.0) -> float:
    """Expected reciprocal rank (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009):

        ERR@k = sum_{i<=k} (1/i) R_i prod_{j<i} (1 - R_j),   R_i = (2^{g_i} - 1) / 2^{g_max}

    with g_max = ``max_grade`` fixed in advance (gdeval.pl, used by ir-measures ``ERR@k``: 4, and it refuses
    larger labels); labels below ``threshold`` have g = 0 (gdeval drops labels <= 0).

    >>> round(err([0, 1], {0: 1, 1: 4}, 2), 6)   # 1/16 + (1/2)(15/16)(15/16)
    0.501953
    """
    labels = labels_of(relevance)
    total, stay = 0.0, 1.0
    for pos, i in enumerate(_top(ranked, k), start=1):
        g = labels.get(i, 0.0)
        r = (2.0**g - 1.0) / 2.0**max_grade if g >= threshold else 0.0
        total += stay * r / pos
        stay *= 1.0 - r
    return total


def average_precision(
    ranked, relevance, k: int, *, denominator: str = "relevant", threshold: float = 1.0, empty: float = 0.0
) -> float:
    """AP@k = (1/Z) sum_{i<=k} P@i rel(i), with Z:

    * ``"relevant"``: |R| (trec_eval ``map_cut``, ranx, RecTools ``MAP()``);
    * ``"k"``: k (RecTools ``MAP(divide_by_k=True)``), so a user with fewer than k relevant items cannot reach 1;
    * ``"min_k_relevant"``: min(k, |R|); ``"hits"``: the number of hits in the top k (torchmetrics).

    ``empty`` when Z is 0.

    >>> average_precision([0, 1, 2], {2: 1, 3: 1}, 3, denominator="k")   # (1/3) / 3
    0.1111111111111111
    """
    rel = relevant_set(relevance, threshold)
    seen, total = 0, 0.0
    for pos, i in enumerate(_top(ranked, k), start=1):
        if i in rel:
            seen += 1
            total += seen / pos
    z = {"relevant": len(rel), "k": k, "min_k_relevant": min(k, len(rel)), "hits": seen}[denominator]
    return total / z if z else empty


def hits(ranked, relevance, k: int, *, threshold: float = 1.0) -> float:
    """Number of relevant items in the top k: a count, not a rate (RecPack ``HitK``, whose ``value`` is
    the mean count over the users that have test items; RecPack counts any non-zero label as relevant).

    >>> hits([0, 1, 2], {0: 1, 2: 3}, 2)
    1.0
    """
    rel = relevant_set(relevance, threshold)
    return float(sum(i in rel for i in _top(ranked, k)))


def precision_recall_curve(
    ranked, relevance, max_k: int, *, n_candidates: int | None = None, adaptive_k: bool = False, threshold: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Per user, (P@1..P@max_k, R@1..R@max_k), torchmetrics ``retrieval_precision_recall_curve``:
    P@k = hits@k / k (``adaptive_k=True``: / min(k, n_candidates)), R@k = hits@k / |R|; both all 0 for a
    user without relevant items (torchmetrics' ``empty_target_action="neg"``)."""
    rel = relevant_set(relevance, threshold)
    if not rel:
        return np.zeros(max_k), np.zeros(max_k)
    top = _top(ranked, max_k)
    hit = np.array([i in rel for i in top] + [False] * (max_k - len(top)), dtype=np.float64)
    cum = np.cumsum(hit)
    ks = np.arange(1, max_k + 1, dtype=np.float64)
    if adaptive_k:
        if n_candidates is None:
            raise ValueError("adaptive_k needs n_candidates")
        ks = np.minimum(ks, n_candidates)
    return cum / ks, cum / len(rel)


def recall_at_fixed_precision(precision: np.ndarray, recall: np.ndarray, min_precision: float) -> tuple[float, int]:
    """Max recall@k over k in 1..len(recall) such that precision@k >= ``min_precision``, and that k.

    torchmetrics ``RetrievalRecallAtFixedPrecision`` applies this to the users' *mean* curves (the mean of
    P@k over users and the mean of R@k over users, k by k), not per user and then averaged. Equal recalls
    go to the largest k; when no k qualifies, or the best recall is 0, it returns (0, max_k).

    >>> recall_at_fixed_precision(np.array([1.0, 0.5, 2 / 3]), np.array([0.5, 0.5, 1.0]), 0.6)
    (1.0, 3)
    """
    best = None
    for kk, (p, r) in enumerate(zip(precision, recall), start=1):
        if p >= min_precision and (best is None or (r, kk) > best):
            best = (float(r), kk)
    if best is None or best[0] == 0.0:
        return 0.0, len(recall)
    return best


def rank_biased_overlap(a, b, depth: int, *, p: float = 0.85, normalize: str = "lenskit") -> float:
    """Rank-biased overlap of two rankings at depth ``depth`` (Webber, Moffat & Zobel, TOIS 2010):

        A_d = |a[:d] ∩ b[:d]| / d,  w_d = p^(d-1)

    * ``normalize="lenskit"``: sum_d w_d A_d / sum_d w_d (LensKit ``rank_biased_overlap(ref, reranked,
      n=depth)``, lenskit/metrics/reranking/_rbo.py); identical lists of length >= depth give 1.
    * ``normalize="webber"``: (1 - p) sum_d w_d A_d, Webber's truncated sum (RBO_min without the
      tail term); at most 1 - p^depth.

    A list shorter than d still divides by d, so short lists lower the agreement.

    >>> round(rank_biased_overlap([1, 2, 3], [2, 1, 4], 3, p=0.5), 4)   # (0 + 0.5*1 + 0.25*2/3) / 1.75
    0.381
    """
    ta, tb = _top(a, None), _top(b, None)
    w = rank_weights(depth, ("geometric", p))
    agree = np.array([len(set(ta[:d]) & set(tb[:d])) / d for d in range(1, depth + 1)])
    if normalize == "lenskit":
        return float(np.dot(w, agree) / w.sum())
    if normalize == "webber":
        return float((1.0 - p) * np.dot(w, agree))
    raise ValueError(f"normalize must be 'lenskit' or 'webber', got {normalize!r}")


def intersection(reco, ref, k: int, ref_k: int | None = None) -> float:
    """|top_k(reco) ∩ top_{ref_k}(ref)| / |top_k(reco)|, ``ref_k`` defaulting to k (RecTools
    ``Intersection(k, ref_k)``: the recall of the first list's top k within the reference's top ref_k).
    The denominator is the length of the cut list, min(k, |reco|), not k; NaN for an empty list (RecTools
    has no row for such a user); a user absent from the reference gives 0.

    >>> intersection([1, 2, 3], [3, 4], 2)   # top-2 {1, 2} vs {3, 4}
    0.0
    """
    top = _top(reco, k)
    if not top:
        return math.nan
    other = set(_top(ref, ref_k if ref_k is not None else k))
    return len(set(top) & other) / len(top)


# --- Beyond accuracy -----------------------------------------------------------------------------


def cosine_distance(x: np.ndarray, y: np.ndarray) -> float:
    """1 - x.y / (|x| |y|)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(1.0 - np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))


def hamming_distance(x: np.ndarray, y: np.ndarray) -> float:
    """Number of differing features (RecTools ``PairwiseHammingDistanceCalculator``: not divided by the
    number of features)."""
    return float(np.sum(np.asarray(x) != np.asarray(y)))


def intra_list_diversity(ranked, k: int, features, *, distance: Callable | str = "cosine") -> float:
    """ILD@k = mean over the unordered pairs i < j of the top k of d(i, j) (Ziegler et al., WWW 2005;
    RecTools ``IntraListDiversity(k, distance_calculator)``, which takes the mean over the pairs present,
    i.e. divides by n(n-1)/2 with n = min(k, |L|)). A list with fewer than two items gives 0 (RecTools).

    >>> round(intra_list_diversity([0, 1, 2], 3, [[1, 0], [0, 1], [1, 1]]), 4)   # (1 + 0.2929 + 0.2929) / 3
    0.5286
    """
    dist = (
        {"cosine": cosine_distance, "hamming": hamming_distance}.get(distance, distance)
        if isinstance(distance, str)
        else distance
    )
    top = _top(ranked, k)
    feats = np.asarray(features, dtype=np.float64)
    pairs = [(a, b) for x, a in enumerate(top) for b in top[x + 1 :]]
    if not pairs:
        return 0.0
    return float(np.mean([dist(feats[a], feats[b]) for a, b in pairs]))


def popularity_dense_ranks(counts) -> np.ndarray:
    """Dense popularity rank of each item, 1 for the largest count (equal counts share a rank); NaN for a
    count of 0 (RecTools' ``Serendipity._get_item_popularity_ranks``: items absent from the training
    interactions have no rank)."""
    counts = np.asarray(counts, dtype=np.float64)
    distinct = sorted({c for c in counts.tolist() if c > 0}, reverse=True)
    rank_of = {c: r for r, c in enumerate(distinct, start=1)}
    return np.array([rank_of.get(c, math.nan) for c in counts.tolist()])


def serendipity(ranked, relevance, k: int, counts, n_items: int, *, threshold: float = 1.0) -> float:
    """RecTools ``Serendipity(k)`` (after the Lab41 post it cites), per user: the mean over the items i of
    the top k (divided by min(k, |L|), not k) of

        max(p(i) - pu(i), 0) * rel(i),   p(i) = (n_items + 1 - rank_in_list(i)) / n_items,
        pu(i) = (n_items + 1 - pop_rank(i)) / n_items  (0 for an item without training interactions),

    pop_rank the dense rank of the item's number of training *interactions* (``popularity_dense_ranks``),
    n_items the catalogue size. NaN for an empty list.

    >>> round(serendipity([2, 0], {2: 1}, 2, [5, 3, 1], 3), 4)   # item 2: p=1, pu=(4-3)/3 -> 2/3; mean of 2
    0.3333
    """
    top = _top(ranked, k)
    if not top:
        return math.nan
    rel = relevant_set(relevance, threshold)
    pop_rank = popularity_dense_ranks(counts)
    vals = []
    for pos, i in enumerate(top, start=1):
        p_user = (n_items + 1 - pos) / n_items
        p_any = 0.0 if np.isnan(pop_rank[i]) else (n_items + 1 - pop_rank[i]) / n_items
        vals.append(max(p_user - p_any, 0.0) * (i in rel))
    return float(np.mean(vals))


def _elliot_novelty(ranked, relevance, k, novelty_of, threshold, discount):
    rel = relevant_set(relevance, threshold)
    top = _top(ranked, k)
    w = rank_weights(len(top), discount)
    if not top:
        return 0.0
    return float(sum(w[p] * (i in rel) * novelty_of(i) for p, i in enumerate(top)) / w.sum())


def epc(ranked, relevance, k: int, counts, n_users: int, *, threshold: float = 1.0, discount="log2") -> float:
    """Expected popularity complement (Vargas & Castells, RecSys 2011) as Elliot computes it
    (elliot/evaluation/metrics/novelty/EPC/epc.py):

        EPC@k = sum_{i<=k} disc(i) rel(i) (1 - c_i / |U|) / sum_{i<=|L_k|} disc(i),   disc(i) = 1/log2(i+1)

    c_i the number of training users of item i, |U| the number of training users; an item without training
    users counts 1 - 0 = 1; rel binary (label >= threshold). The normaliser runs over the list's own length.
    Elliot skips users without relevant test items (their value here is 0); an empty list gives 0.

    >>> round(epc([0, 1], {1: 1}, 2, [3, 1], 4), 4)   # (0.6309 * 0.75) / (1 + 0.6309)
    0.2901
    """
    counts = np.asarray(counts, dtype=np.float64)
    return _elliot_novelty(ranked, relevance, k, lambda i: 1.0 - counts[i] / n_users, threshold, discount)


def efd(ranked, relevance, k: int, counts, *, threshold: float = 1.0, discount="log2") -> float:
    """Expected free discovery (Vargas & Castells, RecSys 2011) as Elliot computes it
    (elliot/evaluation/metrics/novelty/EFD/efd.py): EPC with the novelty -log2(c_i / sum_j c_j), c the
    number of training users per item; an item without training users gets the largest novelty,
    -log2(min_{c_j > 0} c_j / sum_j c_j).

    >>> round(efd([0, 1], {1: 1}, 2, [3, 1]), 4)   # (0.6309 * 2) / (1 + 0.6309)
    0.7737
    """
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    max_nov = -math.log2(counts[counts > 0].min() / total)

    def novelty(i):
        return -math.log2(counts[i] / total) if counts[i] > 0 else max_nov

    return _elliot_novelty(ranked, relevance, k, novelty, threshold, discount)


def mean_inverse_user_frequency(ranked, k: int, counts, n_users: int) -> float:
    """RecTools ``MeanInvUserFreq(k)``: the mean over the top k (divided by min(k, |L|), not k, whatever its
    docstring's formula says) of -log2(c_i / |U|), c_i the number of distinct training users of item i
    (an item without any counts as 1), |U| the number of distinct training users. NaN for an empty list.

    Equals the self-information novelty mean -log2(c_i / N) (N = training interactions) minus log2(N / |U|)
    when every (user, item) pair occurs once in training and no recommended item is cold.

    >>> round(mean_inverse_user_frequency([0, 1], 2, [2, 1], 4), 4)   # (1 + 2) / 2
    1.5
    """
    top = _top(ranked, k)
    if not top:
        return math.nan
    counts = np.asarray(counts, dtype=np.float64)
    return float(np.mean([-math.log2(max(counts[i], 1.0) / n_users) for i in top]))


def category_distribution(items, categories, n_categories: int, weights=None) -> np.ndarray:
    """sum_i w_i p(g|i) / sum_i w_i with p(g|i) = 1/|categories(i)| for each of item i's categories
    (Steck 2018, eq. 1-2); items without a category add nothing to the numerator."""
    items = list(items)
    w = np.ones(len(items)) if weights is None else np.asarray(weights, dtype=np.float64)
    out = np.zeros(n_categories)
    for wi, i in zip(w, items):
        cats = list(categories[i])
        for g in cats:
            out[g] += wi / len(cats)
    return out / w.sum() if w.sum() > 0 else out


def calibration_kl(
    ranked,
    k: int,
    history,
    categories,
    n_categories: int,
    *,
    alpha: float = 0.01,
    rank_discount=None,
    history_weights=None,
    log=math.log,
) -> float:
    """Miscalibration C_KL(p, q) = sum_g p(g|u) log(p(g|u) / q~(g|u)), q~ = (1 - alpha) q + alpha p
    (Steck, "Calibrated Recommendations", RecSys 2018, eq. 3-4; alpha = 0.01 in the paper).

    p(g|u): the category distribution of the user's ``history`` (optionally weighted by ``history_weights``);
    q(g|u): that of the top k, weighted by rank (``rank_discount`` in :func:`rank_weights`'s forms;
    Steck writes the weight w_{r(i)} of the item's rank, e.g. as in nDCG) or uniform (``None``, the plain
    version). Natural log by default (``log=math.log2`` for bits). 0 for an empty history;
    categories absent from p add 0.

    >>> round(calibration_kl([2], 1, [0, 1], [[0], [1], [1]], 2), 4)   # p=(.5,.5), q=(0,1)
    1.9585
    """
    p = category_distribution(history, categories, n_categories, history_weights)
    top = _top(ranked, k)
    w = None if rank_discount is None else rank_weights(len(top), rank_discount)
    q = category_distribution(top, categories, n_categories, w)
    q_t = (1.0 - alpha) * q + alpha * p
    return float(sum(pg * (log(pg) - log(qg)) for pg, qg in zip(p, q_t) if pg > 0))


def rank_biased_entropy(
    ranked, k: int, categories, n_categories: int, *, discount=("geometric", 0.85), smoothing: float = 1e-6
) -> float:
    """Rank-biased category entropy of the top k (LensKit ``rank_biased_entropy``): m_g = smoothing +
    sum_i w(i) [g in categories(i)] over the listed positions i (a 0/1 membership, each item's category
    ids), H = -sum_g (m_g / sum m) log2(m_g / sum m); ``discount`` in :func:`rank_weights`'s forms (None:
    every rank 1, LensKit ``entropy``). NaN for an empty list.

    >>> rank_biased_entropy([0, 1], 2, [[0], [1]], 2, discount=None, smoothing=0.0)   # two categories, equal
    1.0
    """
    top = _top(ranked, k)
    if not top:
        return math.nan
    w = np.ones(len(top)) if discount is None else rank_weights(len(top), discount)
    mass = np.full(n_categories, smoothing)
    for wi, i in zip(w, top):
        for g in set(categories[i]):
            mass[g] += wi
    share = mass / mass.sum()
    return float(-sum(s * math.log2(s) for s in share if s > 0))


def elliot_short_head(counts, pop_ratio: float = 0.8) -> tuple[set, set]:
    """Elliot's popular / long-tail split (elliot/evaluation/popularity_utils/popularity.py): items in
    descending popularity (c = number of distinct training users; equal counts keep item-id order) enter
    the short head until their summed popularity reaches ``pop_ratio`` of all training interactions;
    the long tail is every other item (items without training users included). Returns (head, tail).

    >>> elliot_short_head([10, 5, 2, 1, 1])   # 10 + 5 = 15 < 0.8 * 19 = 15.2, so item 2 joins
    ({0, 1, 2}, {3, 4})
    """
    counts = np.asarray(counts, dtype=np.float64)
    order = sorted(range(len(counts)), key=lambda i: -counts[i])
    limit, head = counts.sum() * pop_ratio, set()
    for i in order:
        head.add(i)
        limit -= counts[i]
        if limit <= 0:
            break
    return head, set(range(len(counts))) - head


def aplt(ranked, k: int, long_tail) -> float:
    """Average percentage of long-tail items (Abdollahpouri, Burke & Mobasher, RecSys 2017; Elliot
    ``APLT``): |set(top k) ∩ tail| / |top k| per user (|top k| = min(k, |L|)); Elliot divides by zero
    on an empty list (NaN here).

    >>> aplt([0, 3, 4], 2, {3, 4})
    0.5
    """
    top = _top(ranked, k)
    return len(set(top) & set(long_tail)) / len(top) if top else math.nan


def aclt(ranked, k: int, long_tail) -> float:
    """Average coverage of long-tail items (Abdollahpouri, Burke & Mobasher, FLAIRS 2019; Elliot ``ACLT``):
    the number of long-tail items in the top k, per user.

    >>> aclt([0, 3, 4], 3, {3, 4})
    2.0
    """
    return float(len(set(_top(ranked, k)) & set(long_tail)))


def _std_over_mean(values) -> float:
    """std / mean (population std); 0 where every value is 0 (no disparity, where numpy's 0 / 0,
    Elliot's, gives NaN); NaN where a value is (a group with nothing available)."""
    values = np.asarray(values, dtype=np.float64)
    if np.all(values == 0):
        return 0.0
    return float(np.std(values) / np.mean(values))


def pop_rsp(lists, histories, k: int, head, tail) -> float:
    """Popularity ranking-based statistical parity (Zhu, Wang & Caverlee, SIGIR 2020; Elliot ``PopRSP``):
    P(g) = sum_u |top_k(u) ∩ g| / sum_u |g \\ history_u| for g in (head, tail), then std(P) / mean(P)
    (population std). Global over users, every user counted.

    >>> round(pop_rsp([[0, 3]], [set()], 2, {0, 1}, {2, 3, 4}), 4)   # P = (1/2, 1/3): std/mean = 0.2
    0.2
    """
    head, tail = set(head), set(tail)
    num, den = np.zeros(2), np.zeros(2)
    for ranked, hist in zip(lists, histories):
        top, hist = set(_top(ranked, k)), set(hist)
        num += [len(top & head), len(top & tail)]
        den += [len(head - hist), len(tail - hist)]
    return _std_over_mean(num / den)


def pop_reo(lists, relevances, histories, k: int, head, tail, *, threshold: float = 1.0) -> float:
    """Popularity ranking-based equal opportunity (Zhu, Wang & Caverlee, SIGIR 2020; Elliot ``PopREO``):
    P(g) = sum_u |top_k(u) ∩ R_u ∩ g| / sum_u |(R_u ∩ g) \\ history_u|, then std(P) / mean(P).
    Users without relevant test items are skipped (as Elliot does).
    """
    head, tail = set(head), set(tail)
    num, den = np.zeros(2), np.zeros(2)
    for ranked, relevance, hist in zip(lists, relevances, histories):
        rel = relevant_set(relevance, threshold)
        if not rel:
            continue
        hit = set(_top(ranked, k)) & rel
        num += [len(hit & head), len(hit & tail)]
        den += [len((head & rel) - set(hist)), len((tail & rel) - set(hist))]
    return _std_over_mean(num / den)


def gini(values) -> float:
    """Gini coefficient G = sum_i (2i - n - 1) x_(i) / (n sum x), x ascending (LensKit ``lenskit.stats.gini``,
    clipped below at 0). Higher = more concentrated.

    >>> round(gini([0, 0, 1, 3]), 4)
    0.625
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    ranks = 2.0 * np.arange(1, n + 1) - n - 1
    return max(float(np.dot(ranks, x) / (n * x.sum())), 0.0)


def item_exposure(lists, n_items: int, k: int, *, discount=None) -> np.ndarray:
    """Per item, the summed weight of the top-k slots it takes over all users' lists; ``discount=None``
    counts each slot 1, otherwise ``rank_weights``'s forms."""
    exposure = np.zeros(n_items)
    for ranked in lists:
        top = _top(ranked, k)
        w = np.ones(len(top)) if discount is None else rank_weights(len(top), discount)
        for p, i in enumerate(top):
            exposure[i] += w[p]
    return exposure


def exposure_gini(lists, n_items: int, k: int, *, discount=("geometric", 0.85)) -> float:
    """Gini of the rank-weighted exposure of every catalogue item (LensKit ``ExposureGini(n=k, items=n_items,
    weight=GeometricRankWeight(0.85))``, lenskit/metrics/ranking/_gini.py); ``discount=None`` gives LensKit's
    ``ListGini`` (the number of lists each item appears in). LensKit sums the exposure in float32."""
    return gini(item_exposure(lists, n_items, k, discount=discount))


def mean_pop_rank(ranked, k: int, counts) -> float:
    """LensKit ``MeanPopRank`` (obscurity): mean over the top k of q_i, q_i = (average rank of c_i among the
    items with c > 0, ascending) / (number of items with c > 0); q = 0 for an item with c = 0. The most
    popular item has q = 1, the least popular one with c > 0 has 1 / n_pos (not 0, whatever LensKit's
    docstring says of min-max scaling). NaN for an empty list.

    >>> mean_pop_rank([0, 2], 2, [5, 0, 1])   # q = (1, 0, 0.5)
    0.75
    """
    top = _top(ranked, k)
    if not top:
        return math.nan
    counts = np.asarray(counts, dtype=np.float64)
    pos = counts[counts > 0]

    def q(i):
        c = counts[i]
        if c <= 0:
            return 0.0
        below, equal = np.sum(pos < c), np.sum(pos == c)
        return (below + (equal + 1) / 2.0) / len(pos)

    return float(np.mean([q(i) for i in top]))


def group_exposure_share(lists, item_group, n_groups: int, k: int, *, discount=None) -> np.ndarray:
    """Share of the top-k slots over all users' lists taken by each item group: sum of the slot weights of
    the group's items / sum of all slot weights (``discount=None``: every slot weighs 1, the share of
    slots; otherwise ``rank_weights``'s forms, e.g. ``"log2"`` for exposure as in Singh & Joachims 2018).

    >>> group_exposure_share([[0, 1], [1, 2]], [0, 1, 1], 2, 2).tolist()
    [0.25, 0.75]
    """
    share = np.zeros(n_groups)
    for ranked in lists:
        top = _top(ranked, k)
        w = np.ones(len(top)) if discount is None else rank_weights(len(top), discount)
        for p, i in enumerate(top):
            share[item_group[i]] += w[p]
    return share / share.sum()
