"""Evaluation data held on disk and in data frames: :class:`Interactions` (test sets, training
histories) with :class:`IdMap` for string ids, and readers of TREC run and qrels files and of
parquet/CSV tables (:mod:`ignite_recsys.data.files`, which needs ``pip install "ignite_recsys[files]"``)."""

from .files import FileFormatError, read_interactions, read_trec_qrels
from .interactions import DuplicateInteractionError, IdMap, Interactions

__all__ = [
    "Interactions",
    "IdMap",
    "DuplicateInteractionError",
    "FileFormatError",
    "read_interactions",
    "read_trec_qrels",
]
