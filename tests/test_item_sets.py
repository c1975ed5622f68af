"""The sorted flat table behind sparse targets and exclusions, against dense numpy arrays."""

import numpy as np
import pytest
import torch

from ignite_recsys._core.item_sets import ItemTable


def _random_sets(rng, users, items, share=0.3):
    stored = rng.random((users, items)) < share
    values = np.where(stored, rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, -1.0], size=(users, items)), 0.0)
    return stored, values


def _tables(stored, values):
    """The same sets in every form: COO (coalesced and not), CSR, padded ids."""
    users, items = stored.shape
    rows, cols = np.nonzero(stored)
    indices = torch.tensor(np.stack([rows, cols]), dtype=torch.int64)
    coo = torch.sparse_coo_tensor(indices, torch.tensor(values[rows, cols]), (users, items)).coalesce()
    perm = np.random.default_rng(0).permutation(len(rows))
    shuffled = torch.sparse_coo_tensor(indices[:, perm], torch.tensor(values[rows, cols][perm]), (users, items))
    width = max(int(stored.sum(1).max()), 1) + 2
    ids = -np.ones((users, width), dtype=np.int64)
    grades = np.zeros((users, width))
    for u in range(users):
        own = np.nonzero(stored[u])[0][::-1]  # any order, padding anywhere after
        ids[u, : len(own)] = own
        grades[u, : len(own)] = values[u, own]
    csr = coo.to_sparse_csr()
    crow = csr.crow_indices()
    reversed_rows = [torch.arange(int(crow[u + 1]) - 1, int(crow[u]) - 1, -1) for u in range(users)]
    order = torch.cat(reversed_rows) if reversed_rows else torch.zeros(0, dtype=torch.int64)
    # columns in descending order within each row: breaks torch's CSR invariant (built without
    # its check); the table must not rely on the order (it is sorted when not ascending)
    unsorted_csr = torch.sparse_csr_tensor(crow, csr.col_indices()[order], csr.values()[order], (users, items))
    return {
        "coo": ItemTable.from_sparse(coo),
        "csr_unsorted": ItemTable.from_sparse(unsorted_csr),
        "coo_uncoalesced": ItemTable.from_sparse(shuffled),
        "csr": ItemTable.from_sparse(coo.to_sparse_csr()),
        "ids": ItemTable.from_ids(torch.tensor(ids), torch.tensor(grades)),
    }


@pytest.mark.parametrize("form", ["coo", "coo_uncoalesced", "csr", "csr_unsorted", "ids"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (9, 40), (3, 0)])
def test_lookup_sums_and_top_values_equal_dense_numpy(form, shape):
    rng = np.random.default_rng(sum(shape))
    stored, values = _random_sets(rng, *shape)
    table = _tables(stored, values)[form]
    users, items = shape
    assert not bool(table.duplicated)
    queries = rng.integers(-1, max(items, 1), size=(users, 6))
    got, found = table.lookup(torch.tensor(queries))
    for u in range(users):
        for j, item in enumerate(queries[u]):
            is_stored = item >= 0 and items > 0 and stored[u, item]
            assert bool(found[u, j]) == is_stored
            assert float(got[u, j]) == (values[u, item] if is_stored else 0.0)
    np.testing.assert_array_equal(table.per_user_sum(table.values).numpy(), (values * stored).sum(1))
    np.testing.assert_array_equal(table.per_user_sum(torch.ones_like(table.values)).numpy(), stored.sum(1))
    for k in (1, 3, 50):
        expected = np.zeros((users, k))
        for u in range(users):
            best = np.sort(values[u][stored[u]])[::-1][:k]
            expected[u, : len(best)] = best
        np.testing.assert_array_equal(table.top_values(k).numpy(), expected)


def test_duplicate_ids_are_flagged():
    ids = torch.tensor([[3, 1, 3, -1], [0, 1, -1, -1]])
    assert bool(ItemTable.from_ids(ids, torch.ones(2, 4)).duplicated)
    ids = torch.tensor([[3, 1, -1, -1], [0, 1, -1, -1]])  # repeated -1 padding is not a duplicate
    assert not bool(ItemTable.from_ids(ids, torch.ones(2, 4)).duplicated)


def test_empty_table():
    table = ItemTable.from_ids(-torch.ones(2, 3, dtype=torch.int64), torch.zeros(2, 3))
    values, found = table.lookup(torch.tensor([[0, 1], [2, -1]]))
    assert not found.any() and not values.any()
    assert table.top_values(2).abs().sum() == 0
