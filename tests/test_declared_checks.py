"""Arguments of the top-level entry points are checked as declared, before anything is read."""

import pytest
import torch

import ignite_recsys as R
from ignite_recsys import Interactions, evaluate

SUMMARY = {
    "A": {"recall@10": (0.5, (0.4, 0.6)), "mrr": (0.2, (0.1, 0.3))},
    "B": {"recall@10": (0.4, (0.3, 0.5)), "mrr": (0.3, (0.2, 0.4))},
}


def test_report_lower_is_better_as_a_bare_string_is_refused():
    # a string is a sequence of letters: it must not be read as the columns "m", "r", "r"
    with pytest.raises(TypeError, match="lower_is_better"):
        R.Report(SUMMARY, lower_is_better="mrr")
    assert R.Report(SUMMARY, lower_is_better=["mrr"]).lower_is_better == {"mrr"}  # the list form is taken


def test_evaluate_sampled_checks_num_threads():
    scores = torch.arange(20, 0, -1, dtype=torch.float64).repeat(2, 1)
    test = Interactions(torch.tensor([0, 1]), torch.tensor([0, 3]), num_items=20)
    sampled = {"num_negatives": 5, "seed": 0, "estimators": ["naive"]}
    with pytest.raises(ValueError, match="num_threads must be a positive int or None"):
        evaluate(lambda users: scores[users], test, ["hit_rate@1"], sampled=sampled, num_threads=0, progress=False)
