"""The examples run (small settings) and their output makes sense, so they cannot go stale."""

import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_evaluate_synthetic_demo(capsys):
    results = _load("evaluate_synthetic").main(["--users", "300", "--items", "800", "--batch-size", "64"])
    printed = capsys.readouterr().out
    assert "taste model" in printed and "popularity" in printed
    taste, popularity = results["taste model"], results["popularity"]
    assert taste["ndcg@10"] > popularity["ndcg@10"]  # the model that knows the tastes ranks better
    for metrics in results.values():
        hit_rates = [metrics[f"hit_rate@{k}"] for k in (1, 5, 10, 20, 50)]
        assert hit_rates == sorted(hit_rates) and all(0 <= v <= 1 for v in hit_rates)
        assert metrics["ranking"]["ndcg@10"] == metrics["ndcg@10"]
