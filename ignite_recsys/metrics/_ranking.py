"""What the ranking metrics share: the relevance options, the input forms, one ranking step per
batch for all the metrics of a class, and the diagnosis of ties at the cut-offs.

Common arguments (ignite's ``NDCG`` signature, plus keywords):

- ``top_k``: an int or a sequence of distinct positive ints; results come in ascending k order.
  A k beyond the number of items reads the whole, shorter list (Precision still divides by k).
- ``ignore_zero_hits`` (ignite's name) or ``skip_users_without_relevant``: users without a
  relevant item are skipped (True) or count as 0 (False).
- ``relevance_threshold``: an item is relevant when ``y >= relevance_threshold``, in every metric,
  compared in y's own dtype as torch compares (a float32 label 0.7 meets the threshold 0.7);
  ``None``: every positive label is relevant (``y > 0``). Negative labels are never relevant.
- ``ties``: ``"stable"`` ranks equal scores by item index, lower first (as a stable descending
  argsort; identical on CPU and CUDA); ``"average"`` gives the expected value over all orders of
  tied scores (McSherry & Najork, ECIR 2008), as torchmetrics and scikit-learn report NDCG.
- ``num_items``: the catalog size, for inputs that hold only ids (``RankedItems`` predictions with
  ``ItemIds`` targets): ids at or past it are refused. Dense and sparse inputs carry it.
- ``per_user``, ``num_groups``: per-user values and per-group results (see :class:`UserMean`).
- ``num_threads``: torch's intra-op threads for every operation of ``update`` on CPU, restored
  after it. None (the default): one thread, except the passes over the whole scores and labels,
  which the update's thread shares in blocks of rows with helper threads (as many threads in all
  as torch's setting) and never waits for: an update then does not wait at each operation for a
  thread whose core another process holds (data-loader workers, other jobs), and slows with the
  load as ``torch.topk`` does. An int: every operation on that many torch threads.
- ``output_transform``, ``device``, ``skip_unrolling``: as in :class:`ignite.metrics.Metric`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .._core.adapters import RankingInput, parse_ranking_input
from .._core.input_checks import warn_if_suspicious, warn_user
from .._core.ranking import RankedBatch, RankingRequest, rank_input
from .._core.relevance import RankingHints
from .._core.tuning import device_constant, ranking_threads
from .._registry import RankingEntry
from ._engine import CutoffResults
from ._state import _identity
from ._users import UserMean, UserRows


class BoundaryTieWarning(UserWarning):
    """Scores tie across a cut-off under ``ties="stable"``: the lower item index decides which
    tied item is in the top k (see :meth:`RankingMetricBase.boundary_tie_share`)."""


def _skip_users(ignore_zero_hits: bool, skip_users_without_relevant: Optional[bool]) -> bool:
    """The one value of ``ignore_zero_hits`` and its clearer alias ``skip_users_without_relevant``."""
    if skip_users_without_relevant is None:
        return ignore_zero_hits
    if not ignore_zero_hits and skip_users_without_relevant:
        raise ValueError(
            "ignore_zero_hits=False and skip_users_without_relevant=True contradict each other: "
            "skip_users_without_relevant is the same setting; pass only one of them"
        )
    return skip_users_without_relevant


def ranking_request(entries, options, top_k, relevance_threshold, ties) -> Optional[RankingRequest]:
    """What the cut-off metrics among ``entries`` (each under ``options[entry.name]``) need from
    the ranking step at the cut-offs ``top_k`` (None: no cut-off metric among them)."""
    cutoff = [entry for entry in entries if entry.has_cutoff]
    if not cutoff:
        return None
    gains = [options[entry.name]["gain_function"] for entry in cutoff if entry.needs.gains]
    extra = tuple(gain for entry in cutoff for gain in entry.needs.extra_gains(options[entry.name]))
    judged = [entry.needs.judged(options[entry.name]) for entry in cutoff]
    return RankingRequest(
        depth=top_k[-1],
        relevance_threshold=relevance_threshold,
        ties=ties,
        gain_function=gains[0] if gains else None,  # metrics that read gains share one gain function
        ideal=any(entry.needs.ideal for entry in cutoff),
        count_relevant=any(entry.needs_relevant_count(options[entry.name]) for entry in cutoff),
        extra_gains=tuple(dict.fromkeys(extra)),
        judged=next((value for value in judged if value is not None), None),
        relevant_candidates=any(entry.needs.relevant_candidates for entry in cutoff),
    )


def evaluate_entries(
    batch: RankingInput,
    entries,
    options,
    top_k,
    request,
    relevance_threshold,
    ties,
    hints: Optional[RankingHints] = None,
) -> tuple:
    """The per-user values of ``entries`` on one batch from one ranking step: (a (batch,
    len(top_k)) column block per cut-off entry, then a (batch, 1) column per entry without
    cut-off; whether each user has a relevant item (batch,) bool; the value checks; the boundary
    tie columns (batch, len(top_k)) float64 or None). Shared by the classes and
    :mod:`ignite_recsys.functional`."""
    columns: list = []
    invalid: dict = {}
    has_relevant = tie_columns = None
    if request is not None:
        ranked = rank_input(batch, request, hints)
        invalid, has_relevant = ranked.invalid, ranked.has_relevant
        columns = [entry.values(ranked, top_k, options[entry.name]) for entry in entries if entry.has_cutoff]
        for entry in entries:
            if entry.has_cutoff:
                invalid.update(entry.value_checks(ranked, options[entry.name]))
        tie_columns = _boundary_tie_columns(ranked, top_k)
    for entry in entries:
        if not entry.has_cutoff:
            values, has_relevant, full_invalid = entry.formula(batch, relevance_threshold, ties)
            columns.append(values)
            invalid = invalid or full_invalid
    return columns, has_relevant, invalid, tie_columns


def _boundary_tie_columns(ranked: RankedBatch, top_k) -> torch.Tensor:
    """(batch, len(top_k)) float64: 1 where the k-th and (k + 1)-th candidates tie in score (0
    without scores, and for a cut-off past the list)."""
    if ranked.boundary_tie is None:
        return torch.zeros(ranked.hit.shape[0], len(top_k), dtype=torch.float64, device=ranked.hit.device)
    device = ranked.boundary_tie.device
    columns = device_constant([min(k, ranked.depth) - 1 for k in top_k], torch.int64, device)
    ties = ranked.boundary_tie.index_select(1, columns)
    if all(k <= ranked.depth for k in top_k):
        return ties
    beyond = device_constant([k > ranked.depth for k in top_k], torch.bool, device)
    return torch.where(beyond, 0.0, ties)  # a cut-off past the list splits nothing


class RankingMetricBase(UserMean):
    """A mean over users of values computed from one shared ranking step (``_entries``, each under
    its conventions ``_options[entry.name]``, at the cut-offs ``top_k``; None for a metric without
    cut-off).

    With cut-offs, the state ``_boundary_ties`` (len(top_k),) counts, per k, the counted users
    whose k-th and (k + 1)-th candidates tie in score (summed on the device). Under
    ``ties="stable"`` the lower item index then decides who is in the top k, which can make a
    metric look better than the model is (a model that scores every item alike gets HR@10 = 1
    when the positive item sits in column 0 of a sampled evaluation); ``compute()`` warns
    (:class:`BoundaryTieWarning`) with the share of such users and points to ``ties="average"``."""

    _parameter_constraints = {
        "ignore_zero_hits": V.BOOLEAN,
        "skip_users_without_relevant": V.Custom(
            "a bool or None (the same setting as ignore_zero_hits)",
            lambda name, value, arguments: None if value is None else V.BOOLEAN.check(name, value, arguments),
            (1, "yes"),
        ),
        "relevance_threshold": V.positive_real(optional=True),
        "ties": V.Options(V.TIE_RULES),
        "num_items": V.positive_int(optional=True),
        "num_threads": V.positive_int(optional=True),
    }
    optional_output_keys = ("exclude",)  # a dict output {"y_pred", "y", "exclude"} passes its exclusion
    _entries: tuple = ()
    _option_keyword = "name"  # how errors name an option: its class keyword, or RankingMetrics' "argument"
    top_k: Optional[list] = None

    def __init__(
        self,
        entries: Sequence[RankingEntry],
        options: dict,  # {entry name: {option name: value}}
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        ties: str = "stable",
        per_user: bool = False,
        num_groups: Optional[int] = None,
        num_items: Optional[int] = None,
        skip_users_without_relevant: Optional[bool] = None,
        num_threads: Optional[int] = None,
    ):
        self.ignore_zero_hits = self.skip_users_without_relevant = _skip_users(
            ignore_zero_hits, skip_users_without_relevant
        )
        self.num_threads = num_threads
        self.relevance_threshold = relevance_threshold
        self.ties = ties
        self.num_items = num_items
        self._entries = tuple(entries)
        self._options = {entry.name: dict(options.get(entry.name, {})) for entry in self._entries}
        for entry in self._entries:
            refused = (
                entry.refuses_average_ties(self._options[entry.name], self._option_keyword)
                if ties == "average"
                else None
            )
            if refused:
                raise ValueError(
                    f"{type(self).__name__}: ties='average' is not available with {refused} for {entry.name!r} "
                    "(the expectation of a ratio of random counts); use ties='stable' or another convention"
                )
        self._request = self._ranking_request()
        self._hints = RankingHints()
        if self.top_k is not None:
            self.add_state("_boundary_ties", (len(self.top_k),))
        super().__init__(output_transform, device, skip_unrolling, per_user=per_user, num_groups=num_groups)

    def _normalized(self, configuration) -> dict:
        """``ignore_zero_hits`` and ``skip_users_without_relevant`` (one setting, two names) as
        one ``ignore_zero_hits``: the value given to either."""
        configuration = dict(configuration)
        alias = configuration.pop("skip_users_without_relevant", "None")
        if alias != "None":
            configuration["ignore_zero_hits"] = alias
        return configuration

    def _ranking_request(self) -> Optional[RankingRequest]:
        return ranking_request(self._entries, self._options, self.top_k, self.relevance_threshold, self.ties)

    def _thread_setting(self):
        """One thread but for the passes over the whole inputs, or ``num_threads`` for all
        (``tuning.ranking_threads``)."""
        return ranking_threads(self.num_threads)

    # Inputs ------------------------------------------------------------------------------------
    def _parse(self, output: Any) -> RankingInput:
        batch = parse_ranking_input(output, num_items=self.num_items, user_tags=True)
        if not self._inputs_looked_at:
            self._inputs_looked_at = True
            raw = output[0] if isinstance(output, (tuple, list)) and output else None
            warn_if_suspicious(raw if isinstance(raw, torch.Tensor) else None, batch.labels)
        return batch

    def _empty_message(self) -> str:
        threshold = (
            "y > 0" if self.relevance_threshold is None else f"y >= relevance_threshold={self.relevance_threshold:g}"
        )
        return (
            f"{type(self).__name__} must have at least one counted user before compute(): with "
            f"ignore_zero_hits=True (skip_users_without_relevant) users without a relevant item are not counted, "
            f"and an item is relevant when {threshold}. Labels in (0, 1) need relevance_threshold=None "
            "(or a lower threshold); ignore_zero_hits=False counts such users as 0."
        )

    # One batch ---------------------------------------------------------------------------------
    def _user_rows(self, batch: RankingInput) -> UserRows:
        columns, has_relevant, invalid, ties = self._evaluate(batch)
        if self.ignore_zero_hits:
            weight = has_relevant.to(torch.float64)
        else:
            weight = torch.ones(has_relevant.shape, dtype=torch.float64, device=has_relevant.device)
        extra = {}
        if self.top_k is not None:
            extra["_boundary_ties"] = (
                weight @ ties
                if ties is not None
                else torch.zeros(len(self.top_k), dtype=torch.float64, device=weight.device)
            )
        return UserRows(torch.cat(columns, 1), weight, invalid, extra, batch.groups, batch.users)

    def _evaluate(self, batch: RankingInput) -> tuple:
        return evaluate_entries(
            batch,
            self._entries,
            self._options,
            self.top_k,
            self._request,
            self.relevance_threshold,
            self.ties,
            self._hints,
        )

    # Tie diagnosis -----------------------------------------------------------------------------
    def boundary_tie_share(self) -> list:
        """Per k (ascending), the share of counted users whose k-th and (k + 1)-th candidates
        tie in score (0.0 before any counted user)."""
        if self.top_k is None:
            raise RuntimeError(f"{type(self).__name__} has no cut-offs")
        ties, count = self._reduced("_boundary_ties", "_count")
        return (ties / count.clamp(min=1)).tolist()

    def compute(self) -> Any:
        result = super().compute()
        if self.top_k is not None and self.ties == "stable":
            shares = self.boundary_tie_share()
            if any(share > 0 for share in shares):
                listed = ", ".join(f"k={k}: {share:.1%}" for k, share in zip(self.top_k, shares) if share > 0)
                warn_user(
                    f"{type(self).__name__}: tied scores across the cut-off ({listed} of users); the lower item "
                    "index decides which is in the top k. Pass ties='average', or break the ties in the scores.",
                    BoundaryTieWarning,
                )
        return result


def option_parameters(entries: Sequence[RankingEntry], attribute: str = "name", skip: Sequence[str] = ()) -> list:
    """Keyword-only ``inspect.Parameter`` of the entries' options (their ``name`` for a single
    class, their ``argument`` for RankingMetrics), each once, in registry order."""
    parameters: dict = {}
    for entry in entries:
        for option in entry.options:
            keyword = getattr(option, attribute)
            if keyword not in skip:
                parameters.setdefault(
                    keyword, inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY, default=option.default)
                )
    return list(parameters.values())


def with_parameters(function: Callable, extra: list) -> inspect.Signature:
    """``function``'s signature without ``self`` and its ``**`` parameter, followed by the ``extra``
    keyword-only parameters."""
    parameters = [
        p for name, p in inspect.signature(function).parameters.items() if name != "self" and p.kind != p.VAR_KEYWORD
    ]
    return inspect.Signature(parameters + extra)


class CutoffMetric(CutoffResults, RankingMetricBase):
    """One ranking metric of the registry at every cut-off in ``top_k``: a subclass names its
    entry (``entry = REGISTRY["ndcg"]``); its convention arguments are the entry's options, as
    keywords. ``compute`` returns a list in ascending-k order, and an attached Engine also gets
    ``"<name>@<k>"`` scalars."""

    entry: RankingEntry
    _parameter_constraints = {"top_k": V.TOP_K}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        entry = vars(cls).get("entry")
        if entry is not None:
            cls._parameter_constraints = {
                **vars(cls).get("_parameter_constraints", {}),
                **{option.name: option.checked_by for option in entry.options},
            }
            # the constructor's own arguments, then the entry's other options as keywords
            init = vars(cls).get("__init__", CutoffMetric.__init__)
            named = set(inspect.signature(init).parameters)
            cls.__signature__ = with_parameters(init, option_parameters([entry], skip=tuple(named)))

    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        *,
        ties: str = "stable",
        per_user: bool = False,
        num_groups: Optional[int] = None,
        num_items: Optional[int] = None,
        skip_users_without_relevant: Optional[bool] = None,
        num_threads: Optional[int] = None,
        **options: Any,
    ):
        self.top_k = list(top_k)  # type: ignore[arg-type]  # checked and sorted: a list
        for option in self.entry.options:
            setattr(self, option.name, options.get(option.name, option.default))
        chosen = {option.name: getattr(self, option.name) for option in self.entry.options}
        super().__init__(
            (self.entry,),
            {self.entry.name: chosen},
            ignore_zero_hits,
            relevance_threshold,
            output_transform,
            device,
            skip_unrolling,
            ties=ties,
            per_user=per_user,
            num_groups=num_groups,
            num_items=num_items,
            skip_users_without_relevant=skip_users_without_relevant,
            num_threads=num_threads,
        )

    def _num_values(self) -> int:
        return len(self.top_k)
