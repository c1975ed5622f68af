"""Exact top-k selection: the one dispatch point between the ranking step and the kernels.

Every selection of the library goes through these three functions; a kernel for another device
(or a compiled one) plugs in here without the ranking step changing.

- :func:`stable_topk`: the ``k`` best items of each dense score row, by score descending then item
  index ascending (a stable descending argsort), found by the group pre-filter of
  :mod:`.groups`; :func:`stable_topk_and_values` also gives the values at those items where
  the selection read them.
- :func:`stable_topk_excluding`: the same over each row's candidates only (excluded items take no
  position; ``-1`` past a row's candidates), :mod:`.excluding`.
- :func:`top_values`: the ``k`` largest values of each row without their positions (the ideal
  ranking's labels), :mod:`.values`.
"""

from .excluding import listed_bound, stable_topk_excluding, stable_topk_excluding_listed
from .groups import LOW_MASK, holds_nan, ordered_int32, stable_topk, stable_topk_and_values, untied_topk
from .values import (
    ValueGroups,
    listed_top_values,
    strided_candidates,
    strided_groups,
    top_values,
    value_group_size,
    value_groups,
)

__all__ = [
    "LOW_MASK",
    "holds_nan",
    "listed_bound",
    "listed_top_values",
    "ordered_int32",
    "stable_topk",
    "stable_topk_and_values",
    "stable_topk_excluding",
    "stable_topk_excluding_listed",
    "strided_candidates",
    "strided_groups",
    "top_values",
    "untied_topk",
    "value_group_size",
    "value_groups",
    "ValueGroups",
]
