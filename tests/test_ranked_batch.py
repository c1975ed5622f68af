"""The ranking step's result has every field whatever its request asked for: a field the request
left out is derived on first use. Each is checked against numpy written from its definition, for
a request that asks for nothing beyond the hits (threshold 1: labels >= 1 are relevant)."""

import numpy as np
import pytest
import torch

from ignite_recsys._core.adapters import parse_ranking_input
from ignite_recsys._core.ranking import RankingRequest, rank_input

DEPTH, THRESHOLD = 4, 1.0


def _inputs(form):
    """(update tuple, scores, labels, excluded mask, stored-label mask) as numpy."""
    rng = np.random.default_rng(11)
    scores = np.stack([rng.permutation(12) for _ in range(5)]).astype(np.float32)  # untied
    labels = rng.integers(-1, 4, size=(5, 12)).astype(np.float64)
    excluded = np.zeros((5, 12), dtype=bool)
    if form == "exclude":
        excluded[np.arange(5), rng.integers(0, 12, size=5)] = True
        excluded[0, np.argmax(scores[0])] = True  # the best-scored item of a user is excluded
    y = torch.from_numpy(labels)
    if form == "sparse":
        y = y.to_sparse()  # the zero labels are not stored
    output = (torch.from_numpy(scores), y) + ((torch.from_numpy(excluded),) if form == "exclude" else ())
    return output, scores, labels, excluded


def _gain(labels):
    return np.where(labels >= THRESHOLD, 2.0**labels - 1, 0.0)


@pytest.mark.parametrize("form", ["dense", "exclude", "sparse"])
def test_fields_left_out_of_the_request_equal_reference(form):
    output, scores, labels, excluded = _inputs(form)
    request = RankingRequest(DEPTH, THRESHOLD, gain_function="exp_rank", count_relevant=False)
    ranked = rank_input(parse_ranking_input(output), request)

    order = np.argsort(np.where(excluded, np.inf, -scores), axis=1, kind="stable")[:, :DEPTH]
    top = np.take_along_axis(labels, order, 1)
    relevant = labels >= THRESHOLD
    np.testing.assert_array_equal(ranked.num_relevant.numpy(), relevant.sum(1))
    np.testing.assert_allclose(ranked.gain.numpy(), _gain(top))
    np.testing.assert_allclose(ranked.gain_of("linear_rank").numpy(), np.where(top >= THRESHOLD, top, 0.0))
    np.testing.assert_allclose(ranked.ideal_gain.numpy(), -np.sort(-_gain(labels), 1)[:, :DEPTH])
    np.testing.assert_array_equal(ranked.num_candidates.numpy(), 12 - excluded.sum(1))
    np.testing.assert_array_equal(ranked.num_relevant_candidates.numpy(), (relevant & ~excluded).sum(1))
    assert ranked.boundary_tie.shape == (5, DEPTH) and not ranked.boundary_tie.any()
    if form != "sparse":  # dense labels judge every item (sparse targets: their stored entries)
        judged = (labels >= 0) & ~relevant
        at_positions, total = ranked.judged("nonnegative")
        np.testing.assert_array_equal(at_positions.numpy(), (top >= 0) & (top < THRESHOLD))
        np.testing.assert_array_equal(total.numpy(), judged.sum(1))
        at_positions, total = ranked.judged("all")
        np.testing.assert_array_equal(at_positions.numpy(), top < THRESHOLD)
        np.testing.assert_array_equal(total.numpy(), (~relevant).sum(1))


def test_ranked_ids_have_no_boundary_ties_and_a_gain_needs_a_gain_function():
    """Ranked ids hold no scores: no cut-off splits a tie. Without a gain function in the request
    the gains are refused by name, not read as None."""
    from ignite_recsys import ItemIds, RankedItems

    ids = torch.tensor([[3, 1, 0, -1], [2, 0, 1, 3]])
    targets = ItemIds(torch.tensor([[1, 2], [2, -1]]), torch.tensor([[2.0, 1.0], [3.0, 0.0]]))
    ranked = rank_input(parse_ranking_input((RankedItems(ids), targets), num_items=4), RankingRequest(3, THRESHOLD))
    np.testing.assert_array_equal(ranked.boundary_tie.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(ranked.num_relevant.numpy(), [2, 1])
    np.testing.assert_array_equal(ranked.num_candidates.numpy(), [3, 4])
    with pytest.raises(ValueError, match="no gain_function"):
        _ = ranked.gain
