"""Models for the examples: matrix factorisation trained with BPR, and a popularity baseline."""

from __future__ import annotations

import torch
from torch import nn


class MatrixFactorization(nn.Module):
    """score(u, i) = <p_u, q_i> + b_i; ``forward(users)`` scores every item: (len(users), items)."""

    def __init__(self, num_users: int, num_items: int, dim: int = 32):
        super().__init__()
        self.users = nn.Embedding(num_users, dim)
        self.items = nn.Embedding(num_items, dim)
        self.item_bias = nn.Embedding(num_items, 1)
        for table in (self.users, self.items):
            nn.init.normal_(table.weight, std=0.1)
        nn.init.zeros_(self.item_bias.weight)

    def forward(self, users: torch.Tensor) -> torch.Tensor:
        return self.users(users) @ self.items.weight.T + self.item_bias.weight.T

    def pair_scores(self, users, items):
        return (self.users(users) * self.items(items)).sum(-1) + self.item_bias(items).squeeze(-1)


def bpr_batches(train: torch.Tensor, batch_size: int, seed: int = 0):
    """One epoch of (user, positive item, sampled negative item) triples, shuffled, in batches."""
    generator = torch.Generator().manual_seed(seed)
    users, positives = torch.nonzero(train, as_tuple=True)
    order = torch.randperm(len(users), generator=generator)
    negatives = torch.randint(train.shape[1], (len(users),), generator=generator)
    return list(
        zip(users[order].split(batch_size), positives[order].split(batch_size), negatives[order].split(batch_size))
    )


def bpr_step(model: MatrixFactorization, optimizer, batch, weight_decay: float = 1e-3) -> float:
    """One BPR update (Rendle et al., 2009): maximise log sigmoid(s(u, i+) - s(u, i-))."""
    users, positives, negatives = batch
    model.train()
    optimizer.zero_grad()
    margin = model.pair_scores(users, positives) - model.pair_scores(users, negatives)
    penalty = sum(table.weight.pow(2).sum() for table in (model.users, model.items)) / len(users)
    loss = -nn.functional.logsigmoid(margin).mean() + weight_decay * penalty
    loss.backward()
    optimizer.step()
    return loss.item()


def train_mf(train: torch.Tensor, epochs: int = 5, dim: int = 32, batch_size: int = 1024, seed: int = 0):
    """A plain-PyTorch training loop (used by the examples that are not about training)."""
    torch.manual_seed(seed)
    model = MatrixFactorization(*train.shape, dim=dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        for batch in bpr_batches(train, batch_size, seed=seed + epoch):
            bpr_step(model, optimizer, batch)
    return model.eval()


def popularity_scores(train: torch.Tensor):
    """A baseline that recommends the most popular training items to everyone."""
    counts = train.sum(0).to(torch.float32)
    return lambda users: counts.expand(len(users), -1)
