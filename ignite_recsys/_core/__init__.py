"""The evaluation pipeline every metric shares, one module per stage, in the order data flows:

1. :mod:`.adapters`: an update's ``(y_pred, y[, exclude])`` in any accepted form (dense scores and
   labels, sparse COO/CSR targets, :class:`~ignite_recsys.ItemIds`,
   :class:`~ignite_recsys.RankedItems`, exclusion masks) is checked and becomes one
   ``RankingInput``; per-user item sets become an :class:`.item_sets.ItemTable`.
2. :mod:`.ranking`: ``rank_input`` turns a ``RankingInput`` into one ``RankedBatch``, the
   per-position quantities of each user's top candidates (every field present: what the
   ``RankingRequest`` did not ask for is derived on first use), using

   - :mod:`.selection`, the one dispatch point of the exact top-k kernels (dense, excluding,
     values only);
   - :mod:`.relevance`, which labels are relevant, their gains and the ideal gains;
   - :mod:`.ties`, the tie policy (``"stable"`` or ``"average"``);
   - :mod:`.full_rows`, the quantities that rank every item (R-Precision, per-user AUC).
3. Per-user formula values: :mod:`.formulas`, one per entry of the metric registry
   :mod:`ignite_recsys._registry` (public as :mod:`ignite_recsys.functional`).
4. Reductions into the metric's state: :mod:`ignite_recsys.metrics._state` (declared states, the
   update template) and :mod:`ignite_recsys.metrics._users` (means, sums of squares, per-user
   values, groups).

:mod:`.tuning` decides how passes are cut into pieces on each device.
"""
