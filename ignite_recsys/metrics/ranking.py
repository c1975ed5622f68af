"""The ranking metrics: thin classes over one shared ranking step, one per registry entry.

Each class names its entry of :mod:`ignite_recsys._registry` (formula, conventions, needs) and
carries its documentation; the common arguments are described in
:mod:`ignite_recsys.metrics._ranking`. A class is the shared :class:`RankingMean` (configuration,
ranking step, per-user mean) with :class:`CutoffResults` (results per cut-off) where it has
cut-offs.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .._registry import REGISTRY
from ._engine import CutoffResults
from ._ranking import RankingMean
from ._state import _identity


class NDCG(CutoffResults, RankingMean):
    r"""Normalized Discounted Cumulative Gain at k.

    .. math::
        \mathrm{NDCG@k} = \frac{\sum_{i=1}^{k} g(rel_i) / \log_2(i+1)}
                               {\sum_{i=1}^{k} g(rel^{*}_i) / \log_2(i+1)}

    where :math:`rel_i` is the relevance at rank i, :math:`rel^*` the relevance sorted descending
    (the ideal ranking cut at k) and g the gain; items with ``y < relevance_threshold`` gain 0.
    A user whose ideal DCG is 0 scores 0. Järvelin & Kekäläinen (2002); signature and default
    gain of :class:`ignite.metrics.rec_sys.NDCG`.

    Args:
        gain_function: ``"exp_rank"`` (also spelled ``"exponential"``) :math:`2^{rel}-1` (ignite,
            ranx ``ndcg_burges``; default), ``"linear_rank"`` (``"linear"``) :math:`rel`
            (trec_eval, ranx ``ndcg``, torchmetrics, scikit-learn), ``"binary"`` 1 per relevant
            item (RecBole, Elliot ``nDCGRendle2020``), ``"exp_rank_shifted"``
            :math:`2^{rel - t + 1}-1` with t = ``relevance_threshold`` (Elliot ``nDCG``), or a
            callable mapping a float64 relevance tensor to gains.
        discount: the rank weight :math:`w(i)` in place of :math:`1/\log_2(i+1)`: ``"log2"``
            (default), ``"log2_clip"`` :math:`1/\log_2(\max(i, 2))` (LensKit's default, whose
            ranks 1 and 2 both weigh 1), or a callable of the float64 1-based positions.
        ideal: ``"achievable"`` (default): IDCG@k of the ideal ranking of the user's labels;
            ``"k_relevant"``: of k items of the user's largest gain, as RecTools' ``NDCG``
            (``divide_by_achievable=False``): a user with fewer than k relevant items stays below 1.

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``NDCG(top_k=[3, 1]).compute()`` is ``[NDCG@1, NDCG@3]``; ``compute_dict()`` labels the values:
    ``{"ndcg@1": ..., "ndcg@3": ...}``.

    Example (the example of ignite's ``NDCG`` documentation):

    >>> import torch
    >>> from ignite_recsys import NDCG
    >>> metric = NDCG(top_k=[1, 2, 3, 4])
    >>> metric.update((torch.tensor([[4.0, 2.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]]),
    ...                torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])))
    >>> [round(v, 4) for v in metric.compute()]
    [0.0, 0.3869, 0.3869, 0.6509]
    >>> {name: round(v, 4) for name, v in metric.compute_dict().items()}
    {'ndcg@1': 0.0, 'ndcg@2': 0.3869, 'ndcg@3': 0.3869, 'ndcg@4': 0.6509}
    """

    entry = REGISTRY["ndcg"]
    _ignite_sums_key = "_sum_ndcg_per_k"

    @V.checks_constructor
    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        gain_function: V.GainFunction = "exp_rank",
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        **keywords: Any,
    ):
        self._start_entry(self._arguments)


class HitRate(CutoffResults, RankingMean):
    r"""Hit rate at k: the share of users with at least one relevant item in their top k.

    .. math:: \mathrm{HR@k} = \mathbb{1}\left[\exists\, i \le k : rel_i \in R\right]

    RecBole ``Hit``, ranx ``hit_rate``, trec_eval ``success_k``. A drop-in for
    :class:`ignite.metrics.rec_sys.HitRate`: the same signature and defaults (``top_k=1``; an
    item is relevant when ``y > 0``, so a label 0.5 is a hit), where the other ranking metrics
    here default to ``relevance_threshold=1.0``. The keyword ``relevance_threshold=t`` makes
    relevance ``y >= t`` as in the other metrics. Beyond ignite: k may exceed the number of items,
    and equal scores are ranked by the documented ``ties`` rule.

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``HitRate(top_k=[3, 1]).compute()`` is ``[HitRate@1, HitRate@3]``; ``compute_dict()`` labels
    the values: ``{"hit_rate@1": ..., "hit_rate@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import HitRate
    >>> metric = HitRate(top_k=[1, 3])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> metric.compute()
    [0.0, 1.0]
    """

    entry = REGISTRY["hit_rate"]
    _ignite_sums_key = "_hits_per_k"

    @V.checks_constructor
    def __init__(
        self,
        top_k: Union[int, Sequence[int]] = 1,
        ignore_zero_hits: bool = True,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        relevance_threshold: Union[float, None] = None,
        **keywords: Any,
    ):
        self._start_entry(self._arguments)


class Recall(CutoffResults, RankingMean):
    r"""Recall at k: the share of a user's relevant items found in the top k.

    .. math:: \mathrm{Recall@k} = \frac{|\hat R_k(u) \cap R(u)|}{Z}

    ``normalization="relevant"``: Z = \|R\| (RecBole, trec_eval, ranx, torchmetrics; default);
    ``"min_k_relevant"``: Z = min(k, \|R\|) (rectorch ``recall_at_k``, RecPack ``CalibratedRecallK``).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``Recall(top_k=[3, 1]).compute()`` is ``[Recall@1, Recall@3]``; ``compute_dict()`` labels the
    values: ``{"recall@1": ..., "recall@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import Recall
    >>> scores, relevance = torch.tensor([[5.0, 4, 3, 2, 1]]), torch.tensor([[1, 0, 1, 1, 1]])
    >>> metric = Recall(top_k=2)
    >>> metric.update((scores, relevance))
    >>> metric.compute()
    [0.25]
    >>> metric = Recall(top_k=2, normalization="min_k_relevant")
    >>> metric.update((scores, relevance))
    >>> metric.compute()
    [0.5]
    """

    entry = REGISTRY["recall"]


class Precision(CutoffResults, RankingMean):
    r"""Precision at k: the share of the top k that is relevant.

    .. math:: \mathrm{P@k} = \frac{|\hat R_k(u) \cap R(u)|}{Z}

    ``normalization="k"``: Z = k, also when there are fewer than k items (RecBole, trec_eval, ranx;
    default); ``"min_k_items"``: Z = min(k, num_items) (torchmetrics ``adaptive_k=True``).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``Precision(top_k=[3, 1]).compute()`` is ``[Precision@1, Precision@3]``; ``compute_dict()``
    labels the values: ``{"precision@1": ..., "precision@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import Precision
    >>> metric = Precision(top_k=[3, 10])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> [round(v, 4) for v in metric.compute()]
    [0.3333, 0.2]
    """

    entry = REGISTRY["precision"]


class MAP(CutoffResults, RankingMean):
    r"""Mean Average Precision at k.

    .. math:: \mathrm{AP@k} = \frac{1}{Z} \sum_{i=1}^{k} \mathbb{1}[rel_i \ge t]\; \mathrm{P@i}

    ``normalization="min_k_relevant"``: Z = min(k, \|R\|) (RecBole; MS Recommenders ``map_at_k``;
    default); ``"relevant"``: Z = \|R\| (trec_eval ``map_cut``, ranx ``map``); ``"hits"``: Z = the
    number of relevant items in the top k (torchmetrics ``RetrievalMAP(top_k)``; AP@k as the mean
    precision at the hits).

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``MAP(top_k=[3, 1]).compute()`` is ``[MAP@1, MAP@3]``; ``compute_dict()`` labels the values:
    ``{"map@1": ..., "map@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import MAP
    >>> scores, relevance = torch.tensor([[5.0, 4, 3, 2, 1]]), torch.tensor([[1, 0, 1, 1, 1]])
    >>> for normalization in ("min_k_relevant", "relevant", "hits"):
    ...     metric = MAP(top_k=2, normalization=normalization)
    ...     metric.update((scores, relevance))
    ...     print(normalization, metric.compute())
    min_k_relevant [0.5]
    relevant [0.25]
    hits [1.0]
    """

    entry = REGISTRY["map"]


class MRR(CutoffResults, RankingMean):
    r"""Mean Reciprocal Rank at k: 1 / rank of the first relevant item, 0 if it is not in the top k.

    .. math:: \mathrm{RR@k} = \max_{i \le k} \frac{\mathbb{1}[rel_i \ge t]}{i}

    RecBole ``MRR``, ranx ``mrr``, torchmetrics ``RetrievalMRR``. (trec_eval's ``recip_rank``
    has no cut-off: it equals ``MRR(top_k=num_items)``.)

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``MRR(top_k=[3, 1]).compute()`` is ``[MRR@1, MRR@3]``; ``compute_dict()`` labels the values:
    ``{"mrr@1": ..., "mrr@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import MRR
    >>> metric = MRR(top_k=[2, 3])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> [round(v, 4) for v in metric.compute()]
    [0.0, 0.3333]
    """

    entry = REGISTRY["mrr"]


class F1(CutoffResults, RankingMean):
    r"""F1 at k: the per-user harmonic mean of P@k (÷ k) and Recall@k (÷ \|R\|), as ranx ``f1``.

    .. math:: \mathrm{F1@k} = \frac{2\,\mathrm{P@k}\,\mathrm{R@k}}{\mathrm{P@k} + \mathrm{R@k}}
                            = \frac{2\, |\hat R_k(u) \cap R(u)|}{k + |R(u)|}

    ``compute()`` returns a list in ascending k order whatever the order of ``top_k``, as ignite:
    ``F1(top_k=[3, 1]).compute()`` is ``[F1@1, F1@3]``; ``compute_dict()`` labels the values:
    ``{"f1@1": ..., "f1@3": ...}``.

    >>> import torch
    >>> from ignite_recsys import F1
    >>> metric = F1(top_k=3)
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 0, 1, 1]])))
    >>> [round(v, 4) for v in metric.compute()]
    [0.4]
    """

    entry = REGISTRY["f1"]


class DCG(CutoffResults, RankingMean):
    r"""Discounted Cumulative Gain at k, not normalised.

    .. math:: \mathrm{DCG@k} = \sum_{i=1}^{k} g(rel_i)\, w(i)

    with the gain g of :class:`NDCG` (``gain_function``, default :math:`2^{rel}-1`) and the rank
    weight w (``discount``: ``"log2"`` :math:`1/\log_2(i+1)`, default; ``"log2_clip"``
    :math:`1/\log_2(\max(i, 2))`, LensKit's; or a callable of the 1-based positions). Järvelin &
    Kekäläinen (2002); ranx ``dcg`` (``gain_function="linear_rank"``) and ``dcg_burges`` (the
    default gain). Unlike NDCG it grows with the number and grades of the relevant items, so it
    compares models on the same users only.

    >>> import torch
    >>> from ignite_recsys import DCG
    >>> metric = DCG(top_k=[2, 4], gain_function="linear_rank")
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0.0, 2.0, 0.0, 1.0]])))
    >>> [round(v, 4) for v in metric.compute()]
    [1.2619, 1.6925]
    """

    entry = REGISTRY["dcg"]


class Hits(CutoffResults, RankingMean):
    r"""The number of relevant items in the top k (a count per user, not a rate).

    .. math:: \mathrm{Hits@k} = |\hat R_k(u) \cap R(u)|

    RecPack ``HitK``, ranx ``hits``.

    >>> import torch
    >>> from ignite_recsys import Hits
    >>> metric = Hits(top_k=[1, 3])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[1, 0, 1, 1]])))
    >>> metric.compute()
    [1.0, 2.0]
    """

    entry = REGISTRY["hits"]


class RBP(CutoffResults, RankingMean):
    r"""Rank-biased precision at k (Moffat & Zobel, TOIS 2008): a user looks one rank further
    with probability p, the ``persistence``.

    .. math:: \mathrm{RBP@k} = (1 - p) \sum_{i=1}^{k} r_i\, p^{i-1}

    ``graded=True`` (default): :math:`r_i` is the label of a relevant item at rank i, as ranx's
    ``rbp`` (which can exceed 1 with labels above 1; ranx reads the whole run: pass k = the run's
    length); ``graded=False``: :math:`r_i = 1` for a relevant item, as the paper and LensKit
    ``RBP``. Items below ``relevance_threshold`` add 0.

    >>> import torch
    >>> from ignite_recsys import RBP
    >>> metric = RBP(top_k=3, persistence=0.5)
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 3, 1, 0]])))
    >>> metric.compute()
    [0.875]
    """

    entry = REGISTRY["rbp"]


class ERR(CutoffResults, RankingMean):
    r"""Expected reciprocal rank at k (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009): the
    expected reciprocal of the rank where a user, scanning down, stops.

    .. math:: \mathrm{ERR@k} = \sum_{i=1}^{k} \frac{R_i}{i} \prod_{j<i} (1 - R_j),\qquad
              R_i = \frac{2^{g_i} - 1}{2^{g_{max}}}

    with :math:`g_i` the grade of a relevant item at rank i (0 otherwise) and :math:`g_{max}` =
    ``max_grade`` (4 as gdeval and ir-measures ``ERR@k``); a ranked grade above it is refused.
    ``ties="average"`` is not available (the product is not a sum of per-rank terms).

    >>> import torch
    >>> from ignite_recsys import ERR
    >>> metric = ERR(top_k=3)
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 3, 1, 0]])))
    >>> round(metric.compute()[0], 4)
    0.2305
    """

    entry = REGISTRY["err"]


class FallOut(CutoffResults, RankingMean):
    r"""Fall-out at k: the share of a user's non-relevant candidates that the top k holds.

    .. math:: \mathrm{FallOut@k} = \frac{|\hat R_k(u) \setminus R(u)|}{|C(u) \setminus R(u)|}

    C(u): the user's candidates (the items not excluded; with :class:`~ignite_recsys.RankedItems`,
    the listed ids). 0 for a user whose candidates are all relevant, as torchmetrics'
    ``retrieval_fall_out`` (its class ``RetrievalFallOut`` counts such a user as 1 by default).
    Lower is better. As every ranking metric here it skips users without a relevant item unless
    ``ignore_zero_hits=False``.

    >>> import torch
    >>> from ignite_recsys import FallOut
    >>> metric = FallOut(top_k=[1, 2])
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), torch.tensor([[0, 1, 0, 1]])))
    >>> metric.compute()
    [0.5, 0.5]
    """

    entry = REGISTRY["fall_out"]


class BPref(CutoffResults, RankingMean):
    r"""Binary preference at k (Buckley & Voorhees, SIGIR 2004), for incomplete judgements: how
    often relevant items are ranked above judged non-relevant ones.

    .. math:: \mathrm{bpref@k} = \frac{1}{R} \sum_{r} \left(1 - \frac{\min(n_r, R)}{\min(R, N)}\right)

    over the relevant items r in the top k, with R the user's relevant items, N its judged
    non-relevant items and :math:`n_r` those ranked above r; a relevant item adds 1 when N = 0,
    as trec_eval's ``bpref``. Judged items: every item of dense labels; the stored entries of
    sparse targets and :class:`~ignite_recsys.ItemIds` (the qrels), so an item without an entry is
    unjudged and takes no part. ``negative_labels="unjudged"`` (default, trec_eval): a negative
    label counts as unjudged; ``"judged"`` (ranx): as judged non-relevant. trec_eval reads the
    whole run: pass k = the run's length. ``ties="average"`` is not available.

    >>> import torch
    >>> from ignite_recsys import BPref
    >>> judged = torch.sparse_coo_tensor(torch.tensor([[0, 0, 0], [0, 1, 2]]), torch.tensor([0.0, 1.0, 0.0]), (1, 4))
    >>> metric = BPref(top_k=4)
    >>> metric.update((torch.tensor([[4.0, 3.0, 2.0, 1.0]]), judged))
    >>> metric.compute_dict()
    {'bpref@4': 0.0}
    """

    entry = REGISTRY["bpref"]


class RPrecision(RankingMean):
    r"""R-Precision: precision at rank \|R\|, the user's own number of relevant items.

    .. math:: \mathrm{RPrec} = \frac{|\hat R_{|R|}(u) \cap R(u)|}{|R(u)|}

    trec_eval ``Rprec``, ranx ``r-precision``, torchmetrics ``RetrievalRPrecision``. It has no
    cut-off and ``compute()`` returns a float. As \|R\| is unbounded by any cut-off, an update on a
    CPU ranks the batch to its largest \|R\| (a top-k selection with k = that number); on a GPU,
    where reading that number would wait for the device, it sorts the full rows.

    >>> import torch
    >>> from ignite_recsys import RPrecision
    >>> metric = RPrecision()
    >>> metric.update((torch.tensor([[5.0, 4, 3, 2, 1]]), torch.tensor([[1, 0, 1, 1, 1]])))
    >>> metric.compute()
    0.75
    """

    entry = REGISTRY["r_precision"]

    @V.checks_constructor
    def __init__(
        self,
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        ties: str = "stable",
        **keywords: Any,
    ):
        self._start_entry(self._arguments)

    def _result(self, means):
        return means[0]


__all__ = [entry.class_name for entry in REGISTRY.values()]
