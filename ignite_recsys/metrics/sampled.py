r"""Evaluation against sampled negatives, and estimates of the full-catalog metrics from it.

:class:`SampledMetrics` ranks each test item (a (user, item) pair) against ``num_negatives``
items sampled for it, keeps the histogram of these sampled ranks (``num_negatives + 1``
counts: the state never grows with the batches) and reports, per metric and cut-off, the naive
sampled metric and the estimates of the full-catalog metric of
:mod:`ignite_recsys._core.sampled_estimators` (Krichene and Rendle's corrections, the
expected-rank rescaling and the maximum-likelihood rank distribution).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, Union

import ignite.distributed as idist
import torch
from ignite.exceptions import NotComputableError

from .. import _validation as V
from .._core import sampled_estimators as E
from .._core.item_sets import dense_of_sparse
from .._core.input_checks import check_dense_tensor, check_dtype, values_only
from .._tdist import t_intervals
from ._state import BatchTotals, StatefulMetric, _identity
from ._lists import DeviceCopies
from ._users import gathered_rows

SAMPLINGS = ("uniform", "popularity")
_SAMPLER_STATES = "sampler_states"  # beside the state: each process's generator states by device
SAMPLED_TIES = ("random", "optimistic", "pessimistic")


def _check_names(name: str, value: Any, choices: Sequence[str]) -> list:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name} must be a non-empty sequence of names from {list(choices)}, got {value!r}")
    unknown = [v for v in value if v not in choices]
    if unknown or len(set(value)) != len(value):
        raise ValueError(f"{name} must hold distinct names from {list(choices)}, got {list(value)}")
    return list(value)


def _check_seed(name: str, value: Any, arguments: Any) -> Any:
    if isinstance(value, torch.Generator):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name} must be an int >= 0 or a torch.Generator, got {value!r}")
    return value


def _check_estimators(name: str, value: Any, arguments: Any) -> list:
    if value is None:  # those whose every value lies in the metric's range, as the sampling defines them
        return list(E.DEFAULT_ESTIMATORS) if arguments.get("sampling") != "popularity" else ["naive"]
    value = _check_names(name, value, E.ESTIMATORS)
    if arguments.get("sampling") == "popularity" and value != ["naive"]:
        raise ValueError(
            f"{name}: the corrections assume uniform sampling; with sampling='popularity' only "
            "estimators=['naive'] is defined"
        )
    return value


def _check_weights(name: str, value: Any, arguments: Any) -> Optional[torch.Tensor]:
    if value is None:
        if arguments.get("sampling") == "popularity":
            raise ValueError(f"{name}: sampling='popularity' needs the items' sampling weights (e.g. their counts)")
        return None
    if arguments.get("sampling") != "popularity":
        raise ValueError(f"{name} is read only with sampling='popularity'")
    value = V.check_item_vector(name, value).clone()
    if not bool((value > 0).any()):
        raise ValueError(
            f"{name} are all 0: popularity sampling draws each negative with probability proportional to its "
            "weight, so at least one weight must be > 0"
        )
    return value


class SampledMetrics(StatefulMetric):
    r"""Ranking metrics of each test item among ``num_negatives`` sampled items, and estimates of
    the same metrics over the full catalog.

    Each test item (a (user, item) pair) is ranked against ``n = num_negatives`` negatives drawn
    for it with replacement among the user's *candidates*: every item that is neither excluded
    nor one of the user's test items in the update (a sampled negative never equals a training
    or test positive). ``sampling="uniform"`` draws them uniformly (RecBole's ``uni100``:
    ``num_negatives=100``); ``"popularity"`` with probability proportional to ``item_weights``
    (RecBole's ``pop100`` draws by interaction counts). A negative drawn twice counts twice. Its
    sampled rank is :math:`r = 1 + \#\{\text{negatives scored above it}\}` plus the tied
    negatives by ``ties``: ``"random"`` (default: a uniformly random place among them, the
    expected value of a random order; RecBole orders ties by ``torch.topk`` over item ids, which
    is no rule), ``"optimistic"`` (the test item before every tied negative) or
    ``"pessimistic"`` (after every one).

    Metrics of one test item at rank r (one relevant item): ``ndcg`` :math:`[r\le k]/\log_2(r+1)`,
    ``recall`` and ``hit_rate`` :math:`[r \le k]`, ``precision`` :math:`[r\le k]/k`, ``map`` and
    ``mrr`` :math:`[r\le k]/r`; means over the test items. With one test item per user these are
    RecBole's values under its sampled protocol (checked against RecBole's evaluator).

    Estimators (formulas and sources in :mod:`ignite_recsys._core.sampled_estimators`):
    ``"naive"`` (the sampled metric itself), ``"kr_bias"`` (Krichene and Rendle's least-bias
    correction, corrected least squares with each per-rank value bounded to the metric's
    range), ``"kr_bv"`` (their bias-variance correction; ``gamma`` weighs the variance),
    ``"rescaled"`` (the metric at the full rank :math:`1 + (r-1)(N-1)/n`), ``"mle"`` (the
    maximum-likelihood full-rank distribution of Jin et al., to a duality gap of ``1e-10``:
    :attr:`mle_gap` holds the gap reached) and ``"kr_bias_unbounded"`` (the least-bias
    correction without bounds: values far outside the metric's range, set by an eigenvalue
    cut-off; asking for it warns). Default (None): ``["naive", "kr_bias", "kr_bv", "mle"]`` for
    uniform sampling, ``"naive"`` alone for popularity sampling, as the others need uniform
    sampling. The mean of every estimator but ``"kr_bias_unbounded"`` lies in the metric's
    range: ``kr_bv``'s per-item values do not (its table reaches below 0 and above 1), and its
    mean is clipped to the range (a projection onto an interval that holds the exact value,
    which never moves the estimate away from it); the intervals of those estimators are
    clipped alike. They
    estimate the full-catalog metric of each test item ranked among its :math:`N` candidates
    (itself and the user's non-excluded non-test items) with ties broken at random; when
    :math:`N` differs between users (exclusions), they use its mean over the test items
    (:meth:`num_candidates`).

    Inputs of ``update``:

    - ``(scores, positives)`` or ``(scores, positives, exclude)``: ``scores`` (batch, num_items)
      float; ``positives`` (batch,) int64 test item ids, or (batch, p) with ``-1`` padding
      (several test items of a user, each ranked on its own); ``exclude`` (batch, num_items)
      bool (or a sparse tensor), items never drawn as negatives (the training history); a test
      item listed there is still ranked.
    - with ``model`` (a callable ``model(users, items) -> scores``, users (batch,) and items
      (batch, m) int64, scores (batch, m)): ``(users, positives)`` or ``(users, positives,
      exclude)``; ``num_items`` is then required. The model scores only the test items and
      their negatives.

    Sampling is reproducible: ``seed`` (an int: a generator on the inputs' device, seeded with
    ``seed`` plus the process rank at each ``reset``) or a ``torch.Generator`` on the inputs'
    device, used as it is: the same updates in the same order draw the same negatives. Negatives
    are drawn update by update, so the same users split into other batches draw other negatives:
    the values then move within the sampling noise (``evaluate(..., sampled=...)`` fixes the
    batches of a run for this reason). It runs on the inputs' device, without synchronisation;
    it reads a (batch, num_items) mask and sorts it (uniform sampling; int64 indices) or takes its
    cumulative weights (popularity, float64).
    Value checks (ids outside the catalog, a user with no candidate negative, NaN scores) raise
    in ``update`` for CPU inputs and in ``compute`` otherwise.

    ``compute()`` returns ``{"<metric>@<k>/<estimator>": value}``; ``per_user()`` (with
    ``per_user=True``) each test item's value for the estimators that define one (all but
    ``mle``), and :meth:`confidence_interval` their Student-t intervals.

    >>> import torch
    >>> from ignite_recsys import SampledMetrics
    >>> scores = torch.arange(1000.0).repeat(4, 1)  # item i scores i
    >>> positives = torch.tensor([999, 998, 500, 0])
    >>> metric = SampledMetrics(top_k=[10], metrics=["hit_rate"], num_negatives=100,
    ...                         estimators=["naive"], seed=0)
    >>> metric.update((scores, positives))
    >>> metric.compute()["hit_rate@10/naive"]  # items 999 and 998 are in the sampled top 10
    0.5
    """

    _counted = "test item"
    _parameter_constraints = {
        "top_k": V.TOP_K,
        "metrics": V.Custom(
            f"a non-empty sequence of distinct names from {list(E.METRICS)}",
            lambda name, value, arguments: _check_names(name, value, E.METRICS),
            ("nope", [], ["ndcg", "ndcg"], 3, None),
        ),
        "num_negatives": V.positive_int(),
        "sampling": V.Options(SAMPLINGS),
        "item_weights": V.Custom(
            "None, or with sampling='popularity' a 1-D tensor of finite weights >= 0, not all 0",
            _check_weights,
            (torch.tensor([1.0, -1.0]), [1.0], "w"),
        ),
        "estimators": V.Custom(
            f"None or a non-empty sequence of distinct names from {list(E.ESTIMATORS)}",
            _check_estimators,
            ("nope", [], ["naive", "naive"], 3),
        ),
        "gamma": V.Interval(float, 0, 1, low_included=False),
        "ties": V.Options(SAMPLED_TIES),
        "model": V.Custom(
            "None or a callable model(users, items) -> scores",
            lambda name, value, arguments: V.CALLABLE.check(name, value, arguments) if value is not None else None,
            (3, "model"),
        ),
        "num_items": V.catalog_size(optional=True),
        "seed": V.Custom("an int >= 0 or a torch.Generator", _check_seed, (-1, 1.5, "0", None, True)),
        "per_user": V.BOOLEAN,
    }
    top_k: list
    metrics: list
    num_negatives: int
    sampling: str
    item_weights: Optional[torch.Tensor]
    gamma: float
    ties: str
    model: Optional[Callable]
    seed: Union[int, torch.Generator]
    num_items: Optional[int]
    _histogram: torch.Tensor
    _count: torch.Tensor
    _candidates_sum: torch.Tensor
    _candidates_min: torch.Tensor
    _candidates_max: torch.Tensor

    @V.checks_constructor
    def __init__(
        self,
        top_k: Union[int, Sequence[int]] = (10,),
        metrics: Sequence[str] = ("ndcg", "recall", "precision", "map", "mrr"),
        num_negatives: int = 100,
        sampling: str = "uniform",
        item_weights: Optional[torch.Tensor] = None,
        estimators: Optional[Sequence[str]] = None,
        gamma: float = 0.01,
        ties: str = "random",
        model: Optional[Callable] = None,
        num_items: Optional[int] = None,
        seed: Union[int, torch.Generator] = 0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        per_user: bool = False,
    ):
        arguments = self._arguments
        if model is not None and num_items is None:
            raise ValueError("num_items: a SampledMetrics with a model needs the catalog size num_items")
        item_weights = arguments["item_weights"]
        if item_weights is not None and num_items is not None and item_weights.numel() != num_items:
            raise ValueError(f"item_weights must have num_items={num_items} entries, got {item_weights.numel()}")
        names = ("top_k", "metrics", "num_negatives", "sampling", "item_weights", "gamma", "ties", "model", "seed")
        self._keep_arguments(arguments, *names, "num_items")
        self._weights = DeviceCopies(item_weights=self.item_weights)  # on the inputs' device, once
        self.estimators: list = list(arguments["estimators"])  # (checked: None is resolved)
        raw = [name for name in self.estimators if name in E.UNBOUNDED_ESTIMATORS]
        if raw:
            warnings.warn(
                f"estimators {raw}: the unconstrained least-bias correction gives values outside the metric's "
                "range (e.g. a recall above 1 or an NDCG below 0), set by an eigenvalue cut-off; 'kr_bias' is the "
                "same correction with the values bounded to the range",
                UserWarning,
                stacklevel=3,  # the user's line: past the constructor and its checks_constructor wrapper
            )
        self.mle_gap: Optional[float] = None  # the duality gap of the last mle estimate (compute())
        self.keeps_per_user = per_user
        self._tables: dict = {}
        self._extremes: tuple = ()  # the batch's least and largest number of candidates (_add reads it)
        self.add_state("_histogram", (self.num_negatives + 1,))
        self.add_state("_count", ())
        self.add_state("_candidates_sum", ())
        self.add_state("_candidates_min", (), reduce="MIN", fill=float("inf"))
        self.add_state("_candidates_max", (), reduce="MAX", fill=float("-inf"))
        super().__init__(output_transform, device, skip_unrolling)

    # Sampling ----------------------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self._generators: dict = {}
        self._per_user_ranks: list = []

    def _generator(self, device: torch.device) -> torch.Generator:
        if isinstance(self.seed, torch.Generator):
            if torch.device(self.seed.device).type != device.type:
                raise ValueError(
                    f"seed: the generator is on {self.seed.device}, the inputs on {device}; pass a generator "
                    "on the inputs' device or an int seed"
                )
            return self.seed
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device).manual_seed(self.seed + idist.get_rank())
        return self._generators[key]

    def _apply(self, inputs: Any) -> None:
        """The batch added, or refused with the sampler where it was: a batch refused (its values
        checked on the host, or the model's scores of the wrong shape) draws nothing for later ones."""
        generator = self._generator(self._inputs_device(inputs))
        before = None if generator is None else generator.get_state()  # None: torch's default (the meta tests)
        try:
            super()._apply(inputs)
        except BaseException:
            if generator is not None:
                generator.set_state(before)
            raise

    # Checkpoints -------------------------------------------------------------------------------
    def state_dict(self):
        """The state (see :class:`StatefulMetric`) and each process's negative sampler
        (``"sampler_states"``: its generators' states by device), so that a resumed metric draws
        the negatives an uninterrupted one would. A ``torch.Generator`` given as ``seed`` is the
        caller's: its state is not saved."""
        state = super().state_dict()
        mine = {key: generator.get_state() for key, generator in self._generators.items()}
        state[_SAMPLER_STATES] = idist.all_gather(mine) if idist.get_world_size() > 1 else [mine]
        return state

    def load_state_dict(self, state_dict: Mapping) -> None:
        state_dict = dict(state_dict) if isinstance(state_dict, Mapping) else state_dict
        samplers = state_dict.pop(_SAMPLER_STATES, None) if isinstance(state_dict, dict) else None
        super().load_state_dict(state_dict)
        if samplers is None:
            if not isinstance(self.seed, torch.Generator):
                warnings.warn(
                    f"{type(self).__name__}.load_state_dict: the state holds no sampler state: the negatives drawn "
                    "after it start again from seed, not where an uninterrupted evaluation would be",
                    UserWarning,
                    stacklevel=2,
                )
            return
        self._generators = {}
        for key, saved in dict(samplers[idist.get_rank()]).items():
            generator = torch.Generator(key)
            generator.set_state(saved.cpu() if isinstance(saved, torch.Tensor) else torch.as_tensor(saved))
            self._generators[key] = generator

    # Updates -----------------------------------------------------------------------------------
    def _parse(self, output: Any) -> tuple:
        if not isinstance(output, Sequence) or isinstance(output, (str, bytes)) or len(output) not in (2, 3):
            first = "users" if self.model is not None else "scores"
            raise TypeError(f"update expects ({first}, positives) or ({first}, positives, exclude), got {output!r:.80}")
        head, positives = output[0], output[1]
        exclude, outside = (output[2] if len(output) == 3 else None), None
        check_dense_tensor("positives", positives)
        check_dtype("positives", positives, (torch.int32, torch.int64), "item ids")
        if positives.ndim not in (1, 2):
            raise ValueError(f"positives must be (batch,) or (batch, p) item ids, got shape {tuple(positives.shape)}")
        if positives.shape[0] == 0 or positives.numel() == 0:
            raise ValueError(
                f"positives must hold at least one user and one item id (-1 padded) per user, got shape "
                f"{tuple(positives.shape)}"
            )
        positives = positives.reshape(positives.shape[0], -1).to(torch.int64)
        batch = positives.shape[0]
        if self.model is not None:
            check_dense_tensor("users", head)
            check_dtype("users", head, (torch.int32, torch.int64), "user ids")
            if head.shape != (batch,):
                raise ValueError(f"users must be (batch,) = ({batch},) user ids, got shape {tuple(head.shape)}")
            num_items = self.num_items
        else:
            check_dense_tensor("scores", head)
            if not head.is_floating_point():
                raise TypeError(f"scores must be a floating tensor, got dtype {head.dtype}")
            if head.ndim != 2 or head.shape[0] != batch:
                raise ValueError(
                    f"scores must be (batch, num_items) with batch={batch} rows (one per row of positives), "
                    f"got shape {tuple(head.shape)}"
                )
            num_items = head.shape[1]
            if num_items == 0:
                raise ValueError(f"scores must hold at least one item column, got shape {tuple(head.shape)}")
            if self.num_items is not None and num_items != self.num_items:
                raise ValueError(
                    f"scores has {num_items} columns, the metric was built with num_items={self.num_items}"
                )
            head = values_only(head)
        if self.item_weights is not None and self.item_weights.numel() != num_items:
            raise ValueError(f"item_weights has {self.item_weights.numel()} entries, the catalog {num_items} items")
        if exclude is not None:
            if not isinstance(exclude, torch.Tensor):
                raise TypeError(f"exclude must be a bool tensor (batch, num_items), got {type(exclude).__name__}")
            if exclude.layout != torch.strided:
                exclude, outside = dense_of_sparse(exclude)
            if exclude.shape != (batch, num_items):
                raise ValueError(
                    f"exclude must be (batch, num_items) = ({batch}, {num_items}), got shape {tuple(exclude.shape)}"
                )
            exclude = exclude if exclude.dtype == torch.bool else exclude != 0
        for name, tensor in (("positives", positives), ("exclude", exclude)):
            if tensor is not None and tensor.device != head.device:
                raise ValueError(
                    f"{name} is on {tensor.device}, the {'users' if self.model else 'scores'} on {head.device}"
                )
        return head, positives, exclude, num_items, outside

    def _inputs_device(self, inputs: Any) -> torch.device:
        return inputs[0].device

    def _sample(self, allowed: torch.Tensor, shape: tuple, generator: torch.Generator) -> tuple:
        """(negatives (batch, p, n) int64, number of candidate negatives per row (batch,) int64,
        (2, batch) bool: a row without any candidate, a row whose candidates all weigh 0)."""
        batch, device = allowed.shape[0], allowed.device
        uniform = torch.rand((batch, shape[1] * shape[2]), generator=generator, device=device, dtype=torch.float64)
        if self.sampling == "uniform":
            # the candidates of each row first, in item order (a stable sort of the mask), then the
            # j-th of them for j uniform in [0, count)
            order = torch.sort((~allowed).to(torch.uint8), dim=1, stable=True).indices
            count = allowed.sum(1, keepdim=True)
            position = (uniform * count).to(torch.int64).clamp_max_(count - 1).clamp_min_(0)
            chosen = order.gather(1, position)
            empty = torch.stack([count[:, 0] == 0, torch.zeros_like(count[:, 0], dtype=torch.bool)])
        else:
            weights = self._weights.get("item_weights", device)
            cumulative = torch.where(allowed, weights, 0.0).cumsum(1)
            total = cumulative[:, -1:]
            chosen = torch.searchsorted(cumulative, uniform * total, right=True)
            count = allowed.sum(1, keepdim=True)
            empty = (total[:, 0] <= 0) & (count[:, 0] > 0)  # candidates, all of weight 0
            empty = torch.stack([count[:, 0] == 0, empty])
        chosen = chosen.clamp_max_(allowed.shape[1] - 1)
        return chosen.view(shape), count[:, 0], empty

    def _batch_totals(self, inputs: Any) -> BatchTotals:
        head, positives, exclude, num_items, outside = inputs
        device = head.device
        generator = self._generator(device)
        batch, width, n = positives.shape[0], positives.shape[1], self.num_negatives
        valid = positives >= 0
        ordered = positives.sort(1).values
        repeated = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any()
        index = positives.clamp(0, num_items - 1)  # what the scores are read at (padding's weight is 0)
        # padding and ids outside the catalog (refused below) marked in a spare column, not at a real
        # item: a scatter of False there would overwrite a test item's True (duplicate indices)
        spare = torch.where(valid & (positives < num_items), positives, num_items)
        is_positive = torch.zeros((batch, num_items + 1), dtype=torch.bool, device=device)
        is_positive = is_positive.scatter_(1, spare, True)[:, :num_items]
        allowed = ~is_positive if exclude is None else ~(is_positive | exclude)
        negatives, count, empty = self._sample(allowed, (batch, width, n), generator)
        if self.model is not None:
            candidates = torch.cat([index.unsqueeze(2), negatives], 2).view(batch, width * (n + 1))
            scored = self.model(head, candidates)
            if not isinstance(scored, torch.Tensor) or tuple(scored.shape) != (batch, width * (n + 1)):
                got = tuple(scored.shape) if isinstance(scored, torch.Tensor) else type(scored).__name__
                raise ValueError(
                    f"model(users, items) must return scores of the items' shape {(batch, width * (n + 1))}, got {got}"
                )
            scored = values_only(scored).view(batch, width, n + 1)
            positive_scores, negative_scores = scored[:, :, :1], scored[:, :, 1:]
        else:
            positive_scores = head.gather(1, index).unsqueeze(2)
            negative_scores = head.gather(1, negatives.view(batch, width * n)).view(batch, width, n)
        above = (negative_scores > positive_scores).sum(2)
        tied = (negative_scores == positive_scores).sum(2)
        if self.ties == "optimistic":
            ranks = above + 1
        elif self.ties == "pessimistic":
            ranks = above + tied + 1
        else:
            draw = torch.rand((batch, width), generator=generator, device=device, dtype=torch.float64)
            ranks = above + 1 + (draw * (tied + 1)).floor().to(torch.int64).clamp_max(tied)
        weight = valid.to(torch.float64)
        histogram = torch.zeros(n + 1, dtype=torch.float64, device=device)
        histogram.index_add_(0, (ranks - 1).view(-1), weight.view(-1))
        candidates = (count.to(torch.float64) + 1.0).unsqueeze(1).expand(batch, width)
        sums = {
            "_histogram": histogram,
            "_count": weight.sum(),
            "_candidates_sum": (candidates * weight).sum(),
        }
        self._extremes = (
            torch.where(valid, candidates, float("inf")).amin().reshape(()),
            torch.where(valid, candidates, float("-inf")).amax().reshape(()),
        )
        if self.model is None:  # every score given is read for NaN, not only those the draw picked
            nan_scores = head.isnan().any()
        else:
            nan_scores = ((positive_scores.isnan() | negative_scores.isnan()).any(2) & valid).any()
        invalid = {
            f"positives holds item ids outside [0, {num_items}) other than -1 (no item)": (
                (positives < -1) | (positives >= num_items)
            ).any(),
            "a user has no candidate negative (every item is excluded or a test item)": (
                empty[0].unsqueeze(1) & valid
            ).any(),
            "item_weights are 0 on every candidate negative of a user (every item of positive weight is excluded "
            "or a test item): popularity sampling cannot draw from them": (empty[1].unsqueeze(1) & valid).any(),
            "positives holds an item id twice for one user (a test item is ranked once: list it once)": repeated,
            (
                "scores hold NaN"
                if self.model is None
                else "the model's scores of a test item or of its sampled negatives hold NaN"
            ): nan_scores,
        }
        if outside is not None:
            invalid[
                "exclude (sparse) holds an entry outside its (batch, num_items) shape: a negative index or one at or "
                "past its size"
            ] = outside
        invalid = {message: flag.to(device) for message, flag in invalid.items()}
        rows = torch.where(valid, ranks.to(torch.float64), torch.nan).view(-1) if self.keeps_per_user else None
        return BatchTotals(sums, invalid, rows)

    def _add(self, sums: dict, bad: Optional[torch.Tensor]) -> None:
        super()._add(sums, bad)
        low, high = (value.to(self._device) for value in self._extremes)
        if bad is not None:
            low = torch.where(bad.to(self._device), float("inf"), low)
            high = torch.where(bad.to(self._device), float("-inf"), high)
        torch.minimum(self._candidates_min, low, out=self._candidates_min)
        torch.maximum(self._candidates_max, high, out=self._candidates_max)

    def _keep(self, totals: BatchTotals, bad: Optional[torch.Tensor]) -> None:
        if totals.rows is not None:
            rows = totals.rows if bad is None else torch.where(bad, torch.nan, totals.rows)
            self._per_user_ranks.append(rows.to(self._device))

    def _configuration(self) -> dict:
        """The seed only chooses the samples: states of different seeds add up."""
        configuration = super()._configuration()
        configuration.pop("seed", None)
        return configuration

    # Results -----------------------------------------------------------------------------------
    def _pairs(self) -> tuple:
        return tuple((name, k) for name in self.metrics for k in self.top_k)  # type: ignore[union-attr]

    def _state(self) -> tuple:
        histogram, count, total, low, high = self._checked(
            "_histogram", "_count", "_candidates_sum", "_candidates_min", "_candidates_max"
        )
        if count == 0:
            raise NotComputableError(f"{type(self).__name__} must have at least one test item before compute().")
        return histogram.cpu(), float(count), round(float(total) / float(count)), float(low), float(high)

    def num_candidates(self) -> tuple:
        """(mean, min, max) over the test items of their number of candidates N (themselves and
        the items negatives are drawn from); the corrections use the rounded mean."""
        histogram, count, mean, low, high = self._state()
        return mean, int(low), int(high)

    def _table(self, estimator: str, num_candidates: int) -> torch.Tensor:
        """(n + 1, len(pairs)) per-item values of a per-item estimator at each sampled rank."""
        key = (estimator, num_candidates)
        if key not in self._tables:
            pairs, n = self._pairs(), self.num_negatives
            if estimator == "naive":
                table = E.naive_tables(pairs, n)
            elif estimator == "rescaled":
                table = E.rescaled_tables(pairs, num_candidates, n)
            else:
                try:
                    gamma = self.gamma if estimator == "kr_bv" else 0.0
                    table = E.krichene_rendle_tables(pairs, num_candidates, n, gamma, estimator == "kr_bias")
                except torch.linalg.LinAlgError:
                    raise ValueError(
                        f"the {estimator!r} estimate has no solution for num_negatives={n} drawn among "
                        f"{num_candidates} candidates per test item (its linear system is singular): draw fewer "
                        "negatives than the candidates, or ask for other estimators (e.g. estimators=['naive', "
                        "'rescaled'])"
                    ) from None
            self._tables[key] = table
        return self._tables[key]

    def _labels(self) -> list:
        return [f"{name}@{k}/{estimator}" for name, k in self._pairs() for estimator in self.estimators]

    def _value_labels(self) -> list:
        return ["/" + label for label in self._labels()]

    def _range(self, estimator: str, num_candidates: int) -> torch.Tensor:
        """(2, pairs) the range an estimate is clipped to: the sampled metric's own (ranks 1 to
        n + 1) for ``naive``, which is that metric; the full-catalog metric's (ranks 1 to N) for
        the estimates of it (clipping moves ``kr_bv``'s alone: the others lie in it)."""
        catalog = self.num_negatives + 1 if estimator == "naive" else num_candidates
        return E.metric_ranges(self._pairs(), catalog)

    def compute(self) -> dict:
        histogram, count, num_candidates, _, _ = self._state()
        per_estimator = {}
        for estimator in self.estimators:
            if estimator == "mle":
                exact_up_to = max(200, 2 * max(k for _, k in self._pairs()))
                values, self.mle_gap = E.mle_estimates(self._pairs(), histogram, num_candidates, exact_up_to)
            else:
                values = histogram @ self._table(estimator, num_candidates) / count
            if estimator not in E.UNBOUNDED_ESTIMATORS:
                low, high = self._range(estimator, num_candidates)
                values = torch.minimum(torch.maximum(values, low), high)
            per_estimator[estimator] = values
        result = {}
        for column, (name, k) in enumerate(self._pairs()):
            for estimator in self.estimators:
                result[f"{name}@{k}/{estimator}"] = float(per_estimator[estimator][column])
        return result

    def confidence_interval(self, level: float = 0.95) -> dict:
        r"""Student-t interval of the mean of the per-item values, ``{"<metric>@<k>/<estimator>":
        (low, high)}`` for the estimators with per-item values (all but ``mle``):
        :math:`\bar x \pm t_{(1+\text{level})/2,\, m-1}\, s / \sqrt m` over the m test items,
        its ends clipped to the metric's range (but for ``kr_bias_unbounded``)."""
        level = V.check_level(level)
        histogram, count, num_candidates, _, _ = self._state()
        if count < 2:
            raise NotComputableError(f"{type(self).__name__}.confidence_interval() needs at least two test items")
        result = {}
        bounds = {}
        for estimator in self.estimators:
            if estimator in E.PER_ITEM_ESTIMATORS:
                table = self._table(estimator, num_candidates)
                total = histogram @ table
                deviations = histogram @ (table - total / count).square()  # about the mean: no cancellation
                low, high = t_intervals(total, deviations, torch.tensor(count, dtype=torch.float64), level)
                if estimator not in E.UNBOUNDED_ESTIMATORS:
                    bottom, top = self._range(estimator, num_candidates)
                    low, high = torch.maximum(low, bottom), torch.minimum(high, top)
                bounds[estimator] = (low.tolist(), high.tolist())
        for column, (name, k) in enumerate(self._pairs()):
            for estimator, (low, high) in bounds.items():
                result[f"{name}@{k}/{estimator}"] = (low[column], high[column])
        return result

    def sampled_ranks(self) -> torch.Tensor:
        """Every test item's sampled rank (float64, needs ``per_user=True``), row after row of
        the updates' ``positives`` (a (batch, p) input gives p entries per row, NaN for ``-1``);
        across processes gathered on every process in rank order (rank 0's items first)."""
        if not self.keeps_per_user:
            raise RuntimeError(f"{type(self).__name__}.sampled_ranks() needs the metric to be built with per_user=True")
        self._checked()
        if not self._per_user_ranks:
            local = torch.zeros(0, dtype=torch.float64, device=self._device)
        else:
            local = torch.cat(self._per_user_ranks)
        kept = int((~local.isnan()).sum())
        if kept != int(self._count):
            raise RuntimeError(
                f"{type(self).__name__}.sampled_ranks(): the per-item ranks do not match the state ({int(self._count)} "
                f"counted test items, {kept} kept); they are not part of state_dict(), so a loaded state has none: "
                "update again from a reset"
            )
        return gathered_rows(local.unsqueeze(1))[:, 0]

    def per_user(self) -> dict:
        """Each test item's value, ``{"<metric>@<k>/<estimator>": (items,) float64}``, for the
        estimators with per-item values, in the order of :meth:`sampled_ranks` (NaN for ``-1``
        entries of ``positives``)."""
        ranks = self.sampled_ranks()
        num_candidates = self._state()[2]
        valid = ~ranks.isnan()
        index = torch.where(valid, ranks - 1, 0).to(torch.int64)
        result = {}
        for estimator in self.estimators:
            if estimator not in E.PER_ITEM_ESTIMATORS:
                continue
            values = self._table(estimator, num_candidates).to(ranks.device)[index]
            for column, (name, k) in enumerate(self._pairs()):
                result[f"{name}@{k}/{estimator}"] = torch.where(valid, values[:, column], torch.nan)
        return result
