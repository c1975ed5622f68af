"""evaluate() with a model callable and a table that numbered its integer ids itself: the model
indexes the original ids, so such a table is refused (it gave a silent wrong mean); with
map_ids=False, or ids that are already 0..n-1, the mean equals pytrec_eval's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
import torch

from ignite_recsys import Interactions, evaluate

NUM_USERS, NUM_ITEMS = 10, 20
SCORES = torch.from_numpy(np.random.default_rng(3).permutation(NUM_USERS * NUM_ITEMS).reshape(NUM_USERS, NUM_ITEMS))
SCORES = SCORES.to(torch.float64)
ROWS = [(u, i) for u in range(NUM_USERS) for i in range(NUM_ITEMS) if (u * 7 + i * 3) % 11 == 0 and u % 2 == 1]
FRAME = pd.DataFrame(ROWS, columns=["user", "item"])


def model(users):
    return SCORES[users]


def _pytrec_ndcg5() -> float:
    qrels = {str(u): {} for u, _ in ROWS}
    for u, i in ROWS:
        qrels[str(u)][str(i)] = 1
    run = {u: {str(i): float(SCORES[int(u), i]) for i in range(NUM_ITEMS)} for u in qrels}
    values = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_5"}).evaluate(run)
    return float(np.mean([v["ndcg_cut_5"] for v in values.values()]))


def test_a_model_and_a_table_that_mapped_integer_ids_are_refused():
    test = Interactions.from_frame(FRAME)
    for num_items in (None, NUM_ITEMS):
        with pytest.raises(ValueError, match="map_ids=False"):
            evaluate(model, test, ["ndcg@5"], num_items=num_items, progress=False)


def test_a_model_with_the_ids_it_knows_matches_pytrec_eval():
    test = Interactions.from_frame(FRAME, map_ids=False)
    got = evaluate(model, test, ["ndcg@5"], num_items=NUM_ITEMS, progress=False)
    assert got["ndcg@5"] == pytest.approx(_pytrec_ndcg5(), abs=1e-12)


def test_a_table_of_ids_already_dense_is_accepted():
    frame = pd.DataFrame({"user": [0, 1, 1, 2], "item": [0, 1, 2, 1]})
    test = Interactions.from_frame(frame)
    scores = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [3.0, 1.0, 2.0]])
    got = evaluate(lambda users: scores[users], test, ["hit_rate@1"], progress=False)
    assert got["hit_rate@1"] == pytest.approx(2 / 3)


def test_an_exclusion_file_with_ids_the_test_table_lacks_is_refused_for_a_model(tmp_path):
    """A test table of ids 0..3 (accepted with a model) and a history file of items 7 and 9: read
    with the test's map, 7 and 9 became dense ids 4 and 5, so columns 4 and 5 were excluded (MRR@2
    0.25 where pytrec_eval without items 7 and 9 gives 0.5), and the caller's map kept them. Now
    refused, naming the way out, and the caller's table is as it was; that way gives pytrec_eval's
    values."""
    frame = pd.DataFrame({"user": [0, 0, 1, 1], "item": [0, 1, 2, 3]})
    pd.DataFrame({"user": [0, 1], "item": [7, 9]}).to_csv(tmp_path / "train.csv", index=False)
    scores = torch.tensor(
        [[0.5, 0.1, 0.2, 0.3, 0.95, 0.0, 0.0, 0.99, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4, 0.95, 0.0, 0.0, 0.0, 0.0, 0.99]],
        dtype=torch.float64,
    )
    test = Interactions.from_frame(frame)
    with pytest.raises(ValueError, match="exclude holds ids the test table does not.*map_ids=False"):
        evaluate(lambda users: scores[users], test, ["mrr@2"], exclude=tmp_path / "train.csv", num_items=10)
    assert test.item_map.ids.tolist() == [0, 1, 2, 3] and test.num_items == 4
    dense = Interactions.from_frame(frame, map_ids=False, num_items=10)
    history = Interactions.from_frame(pd.read_csv(tmp_path / "train.csv"), map_ids=False, num_items=10)
    result = evaluate(lambda users: scores[users], dense, ["mrr@2"], exclude=history, per_user=True, progress=False)
    qrels = {"0": {"0": 1, "1": 1}, "1": {"2": 1, "3": 1}}
    run = {str(u): {str(i): float(scores[u, i]) for i in range(10) if (u, i) not in {(0, 7), (1, 9)}} for u in (0, 1)}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(
        {u: dict(sorted(items.items(), key=lambda kv: -kv[1])[:2]) for u, items in run.items()}
    )
    assert result.per_user()["mrr@2"].tolist() == [reference["0"]["recip_rank"], reference["1"]["recip_rank"]]
