"""The sorted flat table behind sparse targets and exclusions, against dense numpy arrays."""

import numpy as np
import pytest
import torch

from ignite_recsys._core.item_sets import (
    ROW_PADDING,
    ItemTable,
    distinct_in_rows,
    listed_of_mask,
    sort_id_rows,
    sorted_rows,
)


def _random_sets(rng, users, items, share=0.3):
    stored = rng.random((users, items)) < share
    values = np.where(stored, rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, -1.0], size=(users, items)), 0.0)
    return stored, values


def _raw_forms(stored, values):
    """The same sets in every form: COO (coalesced and not), CSR (columns ascending in each row
    and not), padded ids with their grades."""
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
        "coo": coo,
        "csr_unsorted": unsorted_csr,
        "coo_uncoalesced": shuffled,
        "csr": coo.to_sparse_csr(),
        "ids": (torch.tensor(ids), torch.tensor(grades)),
    }


def _tables(stored, values):
    return {
        name: ItemTable.from_ids(*form) if name == "ids" else ItemTable.from_sparse(form)
        for name, form in _raw_forms(stored, values).items()
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


@pytest.mark.parametrize("form", ["coo", "coo_uncoalesced", "csr", "csr_unsorted", "ids"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (9, 40), (3, 0), (4, 300)])
def test_sorted_rows_equal_numpy(form, shape):
    """Each user's items ascending, then ROW_PADDING: for sparse forms the entries of nonzero
    value (a stored zero is no item), for id rows every id >= 0 (grades are not read)."""
    rng = np.random.default_rng(sum(shape) + 1)
    stored, values = _random_sets(rng, *shape)
    raw = _raw_forms(stored, values)[form]
    rows = sorted_rows(raw[0] if form == "ids" else raw)
    kept = stored if form == "ids" else stored & (values != 0)
    assert rows.dtype == torch.int64 and rows.shape[0] == shape[0]
    assert rows.shape[1] >= kept.sum(1).max(initial=0)
    for u in range(shape[0]):
        items = np.flatnonzero(kept[u])
        np.testing.assert_array_equal(rows[u, : len(items)].numpy(), items)
        assert (rows[u, len(items) :] == ROW_PADDING).all()
    for num_items in (0, shape[1] // 2, shape[1]):
        np.testing.assert_array_equal(distinct_in_rows(rows, num_items).numpy(), kept[:, :num_items].sum(1))


@pytest.mark.parametrize("accelerator_path", [False, True])
def test_uncoalesced_coo_duplicates_are_summed_as_torch_defines(monkeypatch, accelerator_path):
    """Duplicate entries of an uncoalesced COO tensor are summed (torch's meaning): by coalesce on
    CPU, by a merge with static shapes on accelerators (no host read). As targets: the sum is the
    grade; as an exclusion: an entry summing to 0 excludes nothing."""
    from ignite_recsys._core import tuning

    if accelerator_path:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    indices = torch.tensor([[0, 0, 0, 0, 1, 1], [1, 3, 1, 3, 0, 2]])
    values = torch.tensor([1.0, 1, -1, 2, 4, 0])  # (0, 1): 1 - 1 = 0; (0, 3): 1 + 2 = 3
    coo = torch.sparse_coo_tensor(indices, values, (2, 5))
    assert not coo.is_coalesced()
    expected = coo.to_dense().numpy()
    table = ItemTable.from_sparse(coo)
    assert not bool(table.duplicated)
    got, _ = table.lookup(torch.arange(5).expand(2, 5).contiguous())
    np.testing.assert_array_equal(got.numpy(), expected)
    np.testing.assert_array_equal(table.per_user_sum(table.values).numpy(), expected.sum(1))
    np.testing.assert_array_equal(table.top_values(2).numpy(), np.sort(expected, 1)[:, ::-1][:, :2])
    excluded = ItemTable.from_sparse(coo, drop_zeros=True)
    np.testing.assert_array_equal(excluded.per_user_sum(excluded.distinct_entries(5)).numpy(), (expected != 0).sum(1))


def test_sorted_rows_keep_duplicate_ids_and_drop_negative_ones_and_entries_summing_to_zero():
    ids = torch.tensor([[5, -1, 2, 5], [-3, -1, -1, -1]], dtype=torch.int32)
    np.testing.assert_array_equal(sorted_rows(ids).numpy(), [[2, 5, 5, ROW_PADDING], [ROW_PADDING] * 4])
    np.testing.assert_array_equal(distinct_in_rows(sorted_rows(ids), 10).numpy(), [2, 0])
    # an uncoalesced COO tensor: (0, 1) stored as +1 and -1 sums to 0 (no item), (0, 3) twice to 2
    coo = torch.sparse_coo_tensor(
        torch.tensor([[0, 0, 0, 0, 1], [1, 3, 1, 3, 0]]), torch.tensor([1.0, 1, -1, 1, 4]), (2, 5)
    )
    rows = sorted_rows(coo)
    assert rows[0, 0] == 3 and (rows[0, 1:] == ROW_PADDING).all()
    assert rows[1, 0] == 0 and (rows[1, 1:] == ROW_PADDING).all()


@pytest.mark.parametrize("shape", [(1, 8), (5, 64), (7, 808), (3, 2_056)])
@pytest.mark.parametrize("share", [0.0, 0.01, 0.3, 1.0])
@pytest.mark.parametrize("in_runs", [False, True])
def test_listed_of_mask_holds_the_true_entries(monkeypatch, shape, share, in_runs):
    """A dense bool mask as a list: its True entries, user by user, items ascending, as a
    coalesced COO tensor; None when the rows may hold more than asked, or are not whole words.
    ``in_runs``: read as larger than the cache, through the maxima of runs of 3 words (with
    words after the last whole run)."""
    from ignite_recsys._core import tuning

    if in_runs:
        monkeypatch.setattr(tuning, "IN_CACHE_SHARE", 0.0)
        monkeypatch.setattr(tuning, "MASK_WORD_RUN", 3)
    rng = np.random.default_rng(shape[1])
    mask = rng.random(shape) < share
    listed = listed_of_mask(torch.from_numpy(mask), shape[1])
    assert listed.is_coalesced()
    np.testing.assert_array_equal(listed.indices().numpy(), np.stack(np.nonzero(mask)))
    np.testing.assert_array_equal(listed.to_dense().numpy(), mask)
    rows = sorted_rows(listed)
    for u in range(shape[0]):
        items = np.flatnonzero(mask[u])
        np.testing.assert_array_equal(rows[u, : len(items)].numpy(), items)
    if mask.sum(1).max(initial=0) > 1:  # words holding entries exceed one per user
        assert listed_of_mask(torch.from_numpy(mask), 0) is None
    assert listed_of_mask(torch.zeros(2, 12, dtype=torch.bool), 5) is None  # 12 items: not whole words
    assert listed_of_mask(torch.zeros(2, 0, dtype=torch.bool), 5) is None


@pytest.mark.parametrize("accelerator_path", [False, True])
@pytest.mark.parametrize("width", [1, 2, 7, 64, 300])
@pytest.mark.parametrize("largest", [10, 1 << 40, (1 << 62) - 1])
def test_sort_id_rows_equals_a_stable_numpy_sort(monkeypatch, accelerator_path, width, largest):
    """Rows of ids (with -1 padding and repeats) ascending, and the column each came from, equal
    ids in column order: on CPU from packed (id, column) keys while ids leave room for the
    column's bits, through torch's sort past that and on the accelerators' path."""
    from ignite_recsys._core import tuning

    if accelerator_path:
        monkeypatch.setattr(tuning, "cpu_tuned", lambda device: False)
    rng = np.random.default_rng(width)
    ids = rng.integers(0, largest, size=(6, width), dtype=np.int64)
    ids[rng.random(ids.shape) < 0.3] = -1
    ids[0, :] = largest - 1  # a row of one id repeated
    ids[1, -1] = -(1 << 40)
    values, columns = sort_id_rows(torch.from_numpy(ids))
    order = np.argsort(ids, axis=1, kind="stable")
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(ids, order, 1))
    np.testing.assert_array_equal(columns.numpy(), order)
