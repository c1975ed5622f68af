"""Data for the examples: a MovieLens-100k ``u.data`` loader and a synthetic implicit-feedback
generator with a popularity skew, both returning dense boolean train/test user-item matrices,
and the metric inputs of a batch of users: the test items as a sparse CSR tensor built from the
test (user, item) pairs, the training items to exclude the same way (``Split.evaluation_batch``).

``u.data`` is tab-separated ``user item rating timestamp`` with 1-based ids (MovieLens-100k from
https://grouplens.org/datasets/movielens/100k/, not shipped here; ``data/u.data.sample`` is a tiny
synthetic file in the same format, used by the tests).
"""

from __future__ import annotations

import argparse
import pathlib
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import torch

SAMPLE = pathlib.Path(__file__).resolve().parent / "data" / "u.data.sample"


@dataclass
class Split:
    train: torch.Tensor  # (users, items) bool: interactions the model may learn from
    test: torch.Tensor  # (users, items) bool: held-out interactions to rank
    description: str

    @property
    def item_popularity(self) -> torch.Tensor:
        """Training interaction count of each item (for the popularity-aware metrics)."""
        return self.train.sum(0)

    @cached_property
    def train_pairs(self) -> torch.Tensor:
        """The training interactions as (user, item) rows (n, 2) int64, sorted by user."""
        return self.train.nonzero()

    @cached_property
    def test_pairs(self) -> torch.Tensor:
        """The test interactions as (user, item) rows (n, 2) int64, sorted by user."""
        return self.test.nonzero()

    def evaluation_batch(self, score_users, users: torch.Tensor, device="cpu"):
        """``(scores, targets, exclude)`` of ``users`` for a ranking or catalog metric update: the
        model's raw scores of every item, the test items and the training items, both as sparse
        CSR (len(users), num_items) tensors built from the (user, item) pairs. Training items are
        excluded: they take no position in the ranking (never recommended, never counted)."""
        num_items = self.train.shape[1]
        targets = pairs_to_csr(self.test_pairs, users, num_items).to(device)
        exclude = pairs_to_csr(self.train_pairs, users, num_items).to(device)
        return score_users(users.to(device)), targets, exclude

    def evaluation_batches(self, score_users, users=None, batch_size: int = 256, device="cpu"):
        """``evaluation_batch`` over ``users`` (default: all) in batches."""
        users = torch.arange(self.train.shape[0]) if users is None else users
        for batch in users.split(batch_size):
            yield self.evaluation_batch(score_users, batch, device)

    def score(self, score_users, users: torch.Tensor, device="cpu"):
        """``(scores, relevance)`` of ``users`` as dense (len(users), num_items) tensors, for the
        score-based metrics (``GAUC`` reads every score): the model's scores with the user's
        training items masked to -inf (not candidates for ``GAUC``), and the test items."""
        scores = score_users(users.to(device))
        return scores.masked_fill(self.train[users].to(device), float("-inf")), self.test[users].to(device)

    def batches(self, score_users, users=None, batch_size: int = 256, device="cpu"):
        """``score`` over ``users`` (default: all) in batches."""
        users = torch.arange(self.train.shape[0]) if users is None else users
        for batch in users.split(batch_size):
            yield self.score(score_users, batch, device)


def pairs_to_csr(pairs: torch.Tensor, users: torch.Tensor, num_items: int) -> torch.Tensor:
    """The interactions of ``users`` as a sparse CSR (len(users), num_items) float32 tensor of
    ones (row r holds the items of ``users[r]``); ``pairs``: (user, item) rows sorted by user."""
    pair_users = pairs[:, 0].contiguous()
    start = torch.searchsorted(pair_users, users)
    count = torch.searchsorted(pair_users, users, right=True) - start
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), count.cumsum(0)])
    # the rows of each user's pairs, user after user: start[r], start[r] + 1, ..., start[r] + count[r] - 1
    rows = torch.repeat_interleave(start - crow[:-1], count) + torch.arange(int(crow[-1]))
    items = pairs[rows, 1]
    with warnings.catch_warnings():  # torch notes once that its sparse CSR support is in beta
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
        return torch.sparse_csr_tensor(
            crow, items, torch.ones(len(items)), size=(len(users), num_items), check_invariants=True
        )


def read_u_data(path) -> torch.Tensor:
    """Rows of (user, item, rating, timestamp) as an int64 tensor (n, 4), ids as in the file."""
    rows = []
    for number, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise ValueError(f"{path}:{number}: expected 4 tab-separated fields, got {len(fields)}")
        rows.append([int(field) for field in fields])
    if not rows:
        raise ValueError(f"{path}: no interactions")
    return torch.tensor(rows, dtype=torch.int64)


def load_movielens(path, min_rating: int = 4, test_share: float = 0.2, seed: int = 0) -> Split:
    """Ratings >= ``min_rating`` as implicit feedback; each user's latest ``test_share`` of
    interactions (by timestamp) is the test set. User and item ids are re-indexed from 0."""
    rows = read_u_data(path)
    users, user_index = torch.unique(rows[:, 0], return_inverse=True)
    items, item_index = torch.unique(rows[:, 1], return_inverse=True)
    keep = rows[:, 2] >= min_rating
    train = torch.zeros(len(users), len(items), dtype=torch.bool)
    test = torch.zeros_like(train)
    for user in range(len(users)):
        mine = torch.nonzero(keep & (user_index == user)).flatten()
        mine = mine[torch.argsort(rows[mine, 3], stable=True)]  # oldest first
        num_test = int(round(len(mine) * test_share))
        cut = len(mine) - num_test
        train[user, item_index[mine[:cut]]] = True
        test[user, item_index[mine[cut:]]] = True
    return Split(train, test, f"{path}: {len(users)} users, {len(items)} items, ratings >= {min_rating}")


def synthetic(users: int = 1000, items: int = 2000, factors: int = 16, seed: int = 0, density: float = 0.02):
    """Implicit feedback from latent tastes plus a Zipf-like item popularity (item 0 most
    popular), 20% of each user's interactions held out. Returns the split and the generating
    (user_taste, item_taste, item_bias), which an "oracle" model can use."""
    generator = torch.Generator().manual_seed(seed)
    user_taste = torch.randn(users, factors, generator=generator)
    item_taste = torch.randn(items, factors, generator=generator)
    item_bias = -0.5 * torch.log(torch.arange(1, items + 1, dtype=torch.float32))  # Zipf-like skew
    affinity = user_taste @ item_taste.T / factors**0.5 + item_bias
    threshold = torch.quantile(affinity.flatten()[:1_000_000], 1 - density)
    chosen = affinity + torch.randn(users, items, generator=generator) > threshold
    test = chosen & (torch.rand(users, items, generator=generator) < 0.2)
    split = Split(chosen & ~test, test, f"synthetic: {users} users, {items} items, popularity skew")
    return split, (user_taste, item_taste, item_bias)


def add_arguments(parser: argparse.ArgumentParser, users: int = 1000, items: int = 2000) -> None:
    """The data options every example takes: a MovieLens file, or the synthetic data's size."""
    parser.add_argument("--data", help="a MovieLens u.data file (default: synthetic data)")
    parser.add_argument("--users", type=int, default=users, help="synthetic data: number of users")
    parser.add_argument("--items", type=int, default=items, help="synthetic data: number of items")


def from_arguments(args: argparse.Namespace) -> Split:
    return load(args.data, users=args.users, items=args.items)


def load(path: Optional[str] = None, **synthetic_args) -> Split:
    """MovieLens ``u.data`` at ``path``, or synthetic data when no path is given."""
    return load_movielens(path) if path else synthetic(**synthetic_args)[0]
