"""One meaning per place of the update tuple: a bare bool tensor third is ``exclude`` (True =
excluded) for the ranking and catalog metrics; the score-based metrics AUC, LogLoss, MAE and RMSE
count the entries of ``Observed(mask)`` (True = observed) and refuse a bare tensor there, so
``(scores, test, train_history)`` can never be read as "only the training entries".

References: scikit-learn's ``roc_auc_score`` and ``log_loss``, numpy's mean absolute and squared
errors, over the entries selected with numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ignite.engine import Engine
from sklearn.metrics import log_loss, roc_auc_score

import ignite_recsys as R

SCORE_BASED = {"AUC": R.AUC, "LogLoss": R.LogLoss, "MAE": R.MAE, "RMSE": R.RMSE}


def _example(seed=0, users=4, items=50):
    """Probabilities (multiples of 1/64, so that the bucketed AUC is exact), test labels and a
    training history (a quarter of the items per user) whose items the model scores high, as a
    model scores the items it was trained on."""
    rng = np.random.default_rng(seed)
    train = rng.random((users, items)) < 0.25
    test = rng.random((users, items)) < 0.2
    scores = np.round((rng.random((users, items)) * 0.6 + 0.4 * train) * 64) / 64  # discrete: AUC exact
    return torch.from_numpy(scores), torch.from_numpy(test.astype(np.float64)), torch.from_numpy(train)


def _reference(name, scores, labels):
    if name == "AUC":
        return roc_auc_score(labels, scores)
    if name == "LogLoss":
        return log_loss(labels, np.clip(scores, 1e-15, 1 - 1e-15), labels=[0, 1])
    if name == "MAE":
        return float(np.mean(np.abs(scores - labels)))
    return math.sqrt(float(np.mean(np.square(scores - labels))))


def _state(metric):
    return {key: value.clone() for key, value in next(iter(metric.state_dict().values()))[0].items()}


@pytest.mark.parametrize("name", sorted(SCORE_BASED))
def test_training_history_as_a_bare_third_element_is_refused(name):
    scores, test, train = _example()
    metric = SCORE_BASED[name]()
    metric.update((scores, test))
    before = _state(metric)
    with pytest.raises(TypeError) as error:
        metric.update((scores, test, train))
    message = str(error.value)
    assert "exclude" in message and "Observed(mask)" in message and "Observed(~exclude)" in message
    after = _state(metric)
    assert before.keys() == after.keys() and all(torch.equal(before[key], after[key]) for key in before)
    assert metric.compute() == pytest.approx(_reference(name, scores.numpy().ravel(), test.numpy().ravel()), abs=1e-12)


@pytest.mark.parametrize("third", [torch.zeros(4, 50), torch.zeros(4, 50, dtype=torch.int64), [[True]], 1])
def test_anything_but_observed_third_is_refused(third):
    scores, test, _ = _example()
    with pytest.raises(TypeError, match=r"Observed\(mask\)"):
        R.MAE().update((scores, test, third))


@pytest.mark.parametrize("name", sorted(SCORE_BASED))
def test_observed_counts_the_observed_entries(name):
    """``Observed(mask)`` counts the entries of the mask, ``Observed(~exclude)`` every entry but
    the excluded ones: on the 4 x 50 example the two give different AUCs (the trap the refusal
    closes), each equal to its reference."""
    scores, test, train = _example()
    s, t, m = scores.numpy(), test.numpy(), train.numpy()
    values = {}
    for label, mask in (("train", train), ("not train", ~train)):
        metric = SCORE_BASED[name]()
        metric.update((scores, test, R.Observed(mask)))
        values[label] = metric.compute()
        keep = mask.numpy()
        assert values[label] == pytest.approx(_reference(name, s[keep], t[keep]), abs=1e-12), label
    if name == "AUC":
        assert abs(values["train"] - values["not train"]) > 0.1, values
    assert m.any() and (~m).any()


@pytest.mark.parametrize("name", sorted(SCORE_BASED))
def test_observed_over_several_updates_with_unread_nan(name):
    """Entries outside the mask are never read (NaN there is fine); batches of different shapes
    pool into one value."""
    rng = np.random.default_rng(3)
    metric = SCORE_BASED[name]()
    kept_scores, kept_labels = [], []
    for shape in ((5, 7), (3, 11), (20,)):
        scores = rng.random(shape)
        scores = np.round(scores * 16) / 16 if name == "AUC" else scores  # discrete: the AUC is exact
        labels = (rng.random(shape) < 0.3).astype(np.float64)
        mask = rng.random(shape) < 0.6
        shown = np.where(mask, scores, np.nan)
        metric.update((torch.from_numpy(shown), torch.from_numpy(labels), R.Observed(torch.from_numpy(mask))))
        kept_scores.append(scores[mask])
        kept_labels.append(labels[mask])
    expected = _reference(name, np.concatenate(kept_scores), np.concatenate(kept_labels))
    assert metric.compute() == pytest.approx(expected, abs=1e-12)


def test_ranking_metrics_read_the_same_tensor_as_exclude():
    """The same tuple given to a ranking metric excludes the training items: the value of the
    scores with those items set to -inf (not candidates)."""
    scores, test, train = _example()
    excluded, masked = R.NDCG(top_k=[5, 10]), R.NDCG(top_k=[5, 10])
    excluded.update((scores, test, train))
    masked.update((scores.masked_fill(train, float("-inf")), test))
    assert excluded.compute() == masked.compute()


def test_gauc_refuses_a_third_element_and_names_the_way_out():
    scores, test, train = _example()
    for third in (train, R.Observed(~train)):
        with pytest.raises(ValueError, match=r"exclude.*-inf"):
            R.GAUC().update((scores, test, third))


@pytest.mark.parametrize("name", sorted(SCORE_BASED))
@pytest.mark.parametrize("wrapped", [False, True], ids=["bare mask", "Observed"])
def test_dict_output_mask_key_is_the_observed_entries(name, wrapped):
    scores, test, train = _example()
    observed = ~train
    engine = Engine(
        lambda engine, batch: {"y_pred": scores, "y": test, "mask": R.Observed(observed) if wrapped else observed}
    )
    SCORE_BASED[name]().attach(engine, "value")
    value = engine.run([0]).metrics["value"]
    keep = observed.numpy()
    assert value == pytest.approx(_reference(name, scores.numpy()[keep], test.numpy()[keep]), abs=1e-12)


@pytest.mark.parametrize(
    "mask, error, message",
    [
        ([True, False], TypeError, "torch.Tensor"),
        (torch.ones(3), TypeError, "bool"),
        (torch.ones(3, 3, dtype=torch.bool).to_sparse(), TypeError, "dense"),
    ],
    ids=["list", "float", "sparse"],
)
def test_observed_checks_its_mask(mask, error, message):
    with pytest.raises(error, match=message):
        R.Observed(mask)


def test_observed_mask_of_another_shape_is_refused():
    scores, test, _ = _example()
    with pytest.raises(ValueError, match="mask must have the shape of y_pred"):
        R.RMSE().update((scores, test, R.Observed(torch.ones(4, 49, dtype=torch.bool))))


@pytest.mark.parametrize(
    "output, error",
    [(torch.rand(3), TypeError), ("ab", TypeError), ((torch.rand(3),), ValueError)],
    ids=["tensor", "text", "one element"],
)
def test_a_malformed_update_names_the_observed_form(output, error):
    for make in SCORE_BASED.values():
        with pytest.raises(error, match=r"\(y_pred, y\) or \(y_pred, y, Observed\(mask\)\)"):
            make().update(output)
