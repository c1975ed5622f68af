"""Metrics without an installable peer, checked against numbers worked by hand from the source formula.

Elliot (sisinflab/elliot) does not install here (it is not on PyPI and pins an old TensorFlow stack): its
EPC, EFD, APLT, ACLT, PopREO, PopRSP and short-head split are read from its source
(elliot/evaluation/metrics/novelty/EPC/epc.py, .../EFD/efd.py, .../bias/{aplt,aclt,pop_reo,pop_rsp}/,
elliot/evaluation/popularity_utils/popularity.py, elliot/evaluation/relevance/relevance.py) and worked
through below on one small case. Calibration (Steck 2018) and the exposure share of item groups have no
peer at all.

The case: training users t0 {0, 1}, t1 {0, 1}, t2 {0}, t3 {2}, so the distinct-user counts of items 0..4 are
3, 2, 1, 0, 0 (6 training pairs, 4 users). Elliot's short head (pop_ratio 0.8): 0.8 * 6 = 4.8; item 0 leaves
1.8, item 1 leaves -0.2 <= 0 and closes it: head {0, 1}, tail {2, 3, 4}. Lists at cut-off 3, relevant test
items and training items of three users: A [0, 2, 3] / {2, 3} / {0, 1}; B [1, 4] / {1, 3} / {0};
C [0, 1, 2] / {} / {2}.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import peer_cases
import pytest
import references_families as ref
from peer_check import agree

COUNTS = [3, 2, 1, 0, 0]
N_USERS = 4
LISTS = [[0, 2, 3], [1, 4], [0, 1, 2]]
RELEVANT = [{2: 1, 3: 1}, {1: 1, 3: 1}, {}]
HISTORY = [{0, 1}, {0}, {2}]
HEAD, TAIL = {0, 1}, {2, 3, 4}
L2, L3, L4 = 1.0, math.log2(3), 2.0  # Elliot's discount of ranks 1, 2, 3 is 1 / log2(rank + 1)


def test_elliot_short_head():
    assert ref.elliot_short_head(COUNTS, 0.8) == (HEAD, TAIL)


def test_elliot_epc():
    # novelty 1 - c/|U|: item 2 -> 0.75, item 1 -> 0.5, item 3 never seen -> 1; relevance binary
    want_a = (0.75 / L3 + 1.0 / L4) / (1 / L2 + 1 / L3 + 1 / L4)
    want_b = (0.5 / L2) / (1 / L2 + 1 / L3)
    for items, rel, want in zip(LISTS, RELEVANT, [want_a, want_b]):
        agree("elliot EPC (hand)", ref.epc(items, rel, 3, COUNTS, N_USERS), want)


def test_elliot_efd():
    # novelty -log2(c / 6): item 2 -> log2(6), item 1 -> log2(3), unseen item 3 -> the largest, log2(6 / 1)
    want_a = (math.log2(6) / L3 + math.log2(6) / L4) / (1 / L2 + 1 / L3 + 1 / L4)
    want_b = (math.log2(3) / L2) / (1 / L2 + 1 / L3)
    for items, rel, want in zip(LISTS, RELEVANT, [want_a, want_b]):
        agree("elliot EFD (hand)", ref.efd(items, rel, 3, COUNTS), want)


def test_elliot_aplt_aclt():
    for items, aplt, aclt in zip(LISTS, [2 / 3, 1 / 2, 1 / 3], [2, 1, 1]):
        agree("elliot APLT (hand)", ref.aplt(items, 3, TAIL), aplt)
        agree("elliot ACLT (hand)", ref.aclt(items, 3, TAIL), aclt)


def test_elliot_pop_rsp():
    # recommended head/tail: A 1/2, B 1/1, C 2/1 -> (4, 4); not in training: A 0/3, B 1/3, C 2/2 -> (3, 8)
    a, b = 4 / 3, 4 / 8
    agree("elliot PopRSP (hand)", ref.pop_rsp(LISTS, HISTORY, 3, HEAD, TAIL), abs(a - b) / (a + b))


def test_elliot_pop_reo():
    # C has no relevant item: skipped. Relevant hits head/tail: A 0/2, B 1/0 -> (1, 2);
    # relevant not in training: A 0/2, B 1/1 -> (1, 3); P = (1, 2/3), std/mean = (1/3) / (5/3)
    agree("elliot PopREO (hand)", ref.pop_reo(LISTS, RELEVANT, HISTORY, 3, HEAD, TAIL), 0.2)


def test_calibration_rank_weighted():
    # categories: item 0 {0}, item 1 {0, 1}, item 2 {1}; history {0, 1}: p = (0.75, 0.25)
    # list [2, 1], weights 1 and 1/log2(3): q = (0.5 w2, w1 + 0.5 w2) / (w1 + w2)
    w1, w2 = 1.0, 1 / L3
    q = np.array([0.5 * w2, w1 + 0.5 * w2]) / (w1 + w2)
    p = np.array([0.75, 0.25])
    qt = 0.99 * q + 0.01 * p
    want = float(np.sum(p * np.log(p / qt)))
    cats = [[0], [0, 1], [1]]
    agree("calibration (hand)", ref.calibration_kl([2, 1], 2, [0, 1], cats, 2, rank_discount="log2"), want)
    plain = np.array([0.25, 0.75])  # uniform weights
    want_plain = float(np.sum(p * np.log(p / (0.99 * plain + 0.01 * p))))
    agree("calibration plain (hand)", ref.calibration_kl([2, 1], 2, [0, 1], cats, 2), want_plain)
    agree("calibration perfect", ref.calibration_kl([0, 1], 2, [0, 1], cats, 2), 0.0)


def test_group_exposure_share_rank_weighted():
    # lists [0, 1] and [1, 2], groups of items (0, 1, 1), log2 weights 1 and 1/log2(3)
    w1, w2 = 1.0, 1 / L3
    got = ref.group_exposure_share([[0, 1], [1, 2]], [0, 1, 1], 2, 2, discount="log2")
    agree("group exposure share (hand)", got[0], w1 / (2 * (w1 + w2)))
    agree("group exposure share (hand)", got[1], (w2 + w1 + w2) / (2 * (w1 + w2)))


def test_rbo_webber_and_lenskit_normalisations():
    """LensKit's RBO is Webber's truncated sum divided by its largest value, 1 - p^depth."""
    for u in peer_cases.make_users(seed=21):
        for depth, p in [(3, 0.5), (10, 0.9)]:
            lk = ref.rank_biased_overlap(u["ranked"], u["other"], depth, p=p)
            wb = ref.rank_biased_overlap(u["ranked"], u["other"], depth, p=p, normalize="webber")
            agree("rbo normalisations", lk * (1 - p**depth), wb)


def test_miuf_is_self_information_minus_log_interactions_per_user():
    """With distinct training pairs and no cold item in the list, MIUF = mean -log2(c_i / N) - log2(N / |U|)."""
    pairs = peer_cases.make_training(seed=22, n_cold=0)
    counts = peer_cases.user_counts(pairs)
    n_pairs, n_users = len(pairs), len({u for u, _ in pairs})
    for u in peer_cases.make_users(seed=23):
        self_info = np.mean([-math.log2(counts[i] / n_pairs) for i in u["ranked"][:5]])
        agree(
            "miuf identity",
            ref.mean_inverse_user_frequency(u["ranked"], 5, counts, n_users),
            self_info - math.log2(n_pairs / n_users),
        )


@pytest.mark.parametrize("k", [1, 3, 25])
def test_ndcg_k_relevant_is_achievable_when_k_items_are_relevant(k):
    """RecTools' two normalisers agree for a user with at least k relevant items, differ below."""
    labels = {i: 1 for i in range(30)}
    ranked = list(range(0, 40, 2))
    a = ref.ndcg(ranked, labels, k, gain="binary")
    b = ref.ndcg(ranked, labels, k, gain="binary", ideal="k_relevant")
    agree("ndcg ideals", a, b)
    assert ref.ndcg(ranked, {0: 1}, 3, gain="binary", ideal="k_relevant") < ref.ndcg(ranked, {0: 1}, 3, gain="binary")
