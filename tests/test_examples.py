"""The examples run (small settings) and their output makes sense, so they cannot go stale."""

import importlib
import pathlib
import sys

import pytest
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))  # the examples import their data and model helpers

import data  # noqa: E402

# A first run prints no warning: the examples break their ties or say why they average over them.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def _load(name):
    """Import an example as a module (by name, so spawned processes can import it too)."""
    return importlib.import_module(name)


SMALL = ["--users", "200", "--items", "400"]


def test_evaluate_synthetic_demo(capsys):
    results = _load("evaluate_synthetic").main(["--users", "300", "--items", "800", "--batch-size", "64"])
    printed = capsys.readouterr().out
    assert "taste model" in printed and "popularity" in printed and "coverage" in printed
    taste, popularity = results["taste model"], results["popularity"]
    assert taste["ranking/ndcg@10"] > popularity["ranking/ndcg@10"]  # the model that knows the tastes ranks better
    assert taste["coverage@10"] > popularity["coverage@10"]  # and recommends more of the catalog
    for metrics in results.values():
        hit_rates = [metrics[f"ranking/hit_rate@{k}"] for k in (1, 5, 10, 20, 50)]
        assert hit_rates == sorted(hit_rates) and all(0 <= v <= 1 for v in hit_rates)
        assert metrics["ranking"]["ndcg@10"] == metrics["ranking/ndcg@10"]


def test_engine_eval_logs_every_epoch_and_learns(capsys):
    history = _load("engine_eval").main(SMALL + ["--epochs", "4", "--no-progress"])
    printed = capsys.readouterr().out
    assert len(history) == 4 and printed.count("epoch ") == 4
    assert all(0 <= value <= 1 for epoch in history for value in epoch.values())
    assert history[-1]["ranking/recall@20"] > history[0]["ranking/recall@20"]  # training helps


def test_engine_eval_on_movielens_sample(capsys):
    history = _load("engine_eval").main(["--data", str(data.SAMPLE), "--epochs", "2", "--no-progress"])
    assert "60 users, 80 items" in capsys.readouterr().out
    assert len(history) == 2


def test_manual_loop_matches_ranking_metrics(capsys):
    results = _load("manual_loop").main(SMALL + ["--epochs", "1"])
    combined = results["all ranking"]
    assert results["ndcg"] == [combined[f"ndcg@{k}"] for k in (5, 10, 20)]
    assert results["recall"] == [combined[f"recall@{k}"] for k in (5, 10, 20)]
    assert 0.5 < results["gauc"] <= 1
    assert "gauc" in capsys.readouterr().out


@pytest.mark.slow
def test_distributed_eval_every_rank_equals_single_process(capsys):
    results = _load("distributed_eval").main(SMALL + ["--nproc", "2", "--backend", "gloo"])
    assert results["largest_difference"] < 1e-9
    assert len(results["ranks"]) == 2 and results["ranks"][0] == results["ranks"][1]


def test_distributed_shares_cover_every_user_once():
    share_of = _load("distributed_eval").share_of
    for world in (1, 2, 3, 5):
        users = torch.cat([share_of(rank, world, 101) for rank in range(world)])
        assert users.tolist() == list(range(101))


def test_plot_metric_at_k_writes_png(tmp_path, capsys):
    out = tmp_path / "curves.png"
    results, path = _load("plot_metric_at_k").main(SMALL + ["--max-k", "15", "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    for curves in results.values():
        assert len(curves["recall"]) == 15 and curves["recall"] == sorted(curves["recall"])
        for name in ("ndcg", "recall"):  # each band holds its curve and has some width
            bands = curves[f"{name}_interval"]
            assert len(bands) == 15 and all(low <= v <= high for v, (low, high) in zip(curves[name], bands))
            assert all(high - low > 0 for low, high in bands[4:])


def test_movielens_loader_reads_the_sample():
    split = data.load_movielens(data.SAMPLE, min_rating=4)
    rows = data.read_u_data(data.SAMPLE)
    kept = rows[rows[:, 2] >= 4]
    assert int(split.train.sum() + split.test.sum()) == len({(u, i) for u, i in kept[:, :2].tolist()})
    assert not (split.train & split.test).any()
    # the test items are each user's latest interactions
    for user in range(split.train.shape[0]):
        if split.test[user].any() and split.train[user].any():
            mine = kept[kept[:, 0] == torch.unique(rows[:, 0])[user]]
            test_items = set((torch.nonzero(split.test[user]).flatten() + 1).tolist())
            latest_train = max(t for u, i, r, t in mine.tolist() if i not in test_items)
            earliest_test = min(t for u, i, r, t in mine.tolist() if i in test_items)
            assert latest_train <= earliest_test


def test_movielens_loader_rejects_malformed_lines(tmp_path):
    bad = tmp_path / "u.data"
    bad.write_text("1\t2\t5\n")
    with pytest.raises(ValueError, match="4 tab-separated fields"):
        data.read_u_data(bad)


def test_synthetic_data_has_a_popularity_skew():
    split, _ = data.synthetic(300, 600)
    popularity = split.item_popularity.float()
    assert popularity[:60].mean() > 5 * popularity[-60:].mean()
    assert not (split.train & split.test).any()


def test_tensorboard_logging_writes_one_scalar_per_value(tmp_path, monkeypatch, capsys):
    """Through Ignite's TensorBoard OutputHandler, with a writer that records instead of writing
    event files (TensorBoard itself need not be installed)."""
    from ignite.handlers.tensorboard_logger import TensorboardLogger

    example = _load("tensorboard_logging")

    class RecordingWriter:
        def __init__(self):
            self.scalars = []

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, value, step))

        def close(self):
            pass

    class RecordingLogger(TensorboardLogger):
        def __init__(self, log_dir):
            self.writer = RecordingWriter()

    logger = RecordingLogger(tmp_path)
    monkeypatch.setattr(example, "make_logger", lambda log_dir: logger)
    result = example.main(SMALL + ["--epochs", "3", "--log-dir", str(tmp_path)])
    names = [f"ranking/{m}@{k}" for m in ("ndcg", "recall", "hit_rate") for k in (5, 10, 20)]
    names += ["coverage@5", "coverage@10", "coverage@20", "gauc"]
    assert result["names"] == names
    logged = logger.writer.scalars
    assert [tag for tag, _, step in logged if step == 1] == [f"validation/{name}" for name in names]
    assert len(logged) == 3 * len(names) and sorted({step for _, _, step in logged}) == [1, 2, 3]
    assert all(isinstance(value, float) for _, value, _ in logged)
    for tag, value, step in logged:
        assert value == result["history"][step - 1][tag.removeprefix("validation/")]
    # the model gets less noisy every epoch, so it ranks better
    assert result["history"][-1]["ranking/ndcg@10"] > result["history"][0]["ranking/ndcg@10"]
    assert "epoch 3" in capsys.readouterr().out


def test_tensorboard_logging_runs_with_or_without_tensorboard(tmp_path, capsys):
    result = _load("tensorboard_logging").main(SMALL + ["--epochs", "1", "--log-dir", str(tmp_path / "run")])
    printed = capsys.readouterr().out
    if result["logger"] is None:  # TensorBoard not installed: the values are printed, nothing written
        assert "TensorBoard is not available" in printed and not (tmp_path / "run").exists()
    else:
        assert any(path.name.startswith("events.out.tfevents") for path in (tmp_path / "run").iterdir())
    assert len(result["history"]) == 1 and len(result["history"][0]) == 13
