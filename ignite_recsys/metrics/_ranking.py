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

On CPU, small ``(scores, labels)`` batches are held and ranked together, with the state the same to
the last bit as with each ranked on its own (:mod:`ignite_recsys._core.gathering`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .. import _validation as V
from .._core.adapters import RankingInput, parse_ranking_input
from .._core.gathering import HeldBatches, holdable
from .._core.input_checks import raise_if_invalid, warn_if_suspicious, warn_user
from .._core.ranking import RankedBatch, RankingRequest, rank_input
from .._core.relevance import RankingHints
from .._core.tuning import device_constant, ranking_threads
from .._registry import RankingEntry
from ._state import _identity
from ._users import UserMean, UserRows


class BoundaryTieWarning(UserWarning):
    """Scores tie across a cut-off under ``ties="stable"``: the lower item index decides which
    tied item is in the top k (see :meth:`RankingMean.boundary_tie_share`)."""


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


# The keyword-only arguments of every ranking metric, after its positional ones: (default,
# annotation). Each class's signature lists those it does not take positionally from here.
RANKING_KEYWORDS = {
    "ties": ("stable", "str"),
    "per_user": (False, "bool"),
    "num_groups": (None, "Optional[int]"),
    "num_items": (None, "Optional[int]"),
    "skip_users_without_relevant": (None, "Optional[bool]"),
    "num_threads": (None, "Optional[int]"),
}
# arguments that set up the metric rather than what it computes (not kept as attributes)
_MACHINERY = ("output_transform", "device", "skip_unrolling", "per_user", "num_groups")


@dataclass(frozen=True)
class RankingConfig:
    """What a ranking metric computes and how, built once from checked arguments (by the classes
    and by :mod:`ignite_recsys.functional`): the registry ``entries`` (those with cut-offs first),
    each under its conventions ``options[entry.name]``, at the cut-offs ``top_k`` (None without
    a cut-off metric), and the relevance and tie conventions."""

    entries: tuple
    options: dict
    top_k: Optional[list] = None
    ignore_zero_hits: bool = True
    relevance_threshold: Optional[float] = 1.0
    ties: str = "stable"
    num_items: Optional[int] = None
    num_threads: Optional[int] = None

    @classmethod
    def of(cls, owner: str, arguments: Mapping, entries: Sequence, options: Mapping, keyword: str = "name"):
        """The configuration of checked ``arguments`` (``ignore_zero_hits`` merged with its alias
        ``skip_users_without_relevant``); a ValueError when ``ties="average"`` meets a metric or a
        choice (named by ``keyword`` of its option) that rules it out."""
        ordered = [e for e in entries if e.has_cutoff] + [e for e in entries if not e.has_cutoff]
        config = cls(
            tuple(ordered),
            {entry.name: dict(options.get(entry.name, {})) for entry in ordered},
            arguments.get("top_k"),
            _skip_users(arguments["ignore_zero_hits"], arguments.get("skip_users_without_relevant")),
            arguments["relevance_threshold"],
            arguments["ties"],
            arguments.get("num_items"),
            arguments.get("num_threads"),
        )
        for entry in config.entries:
            refused = (
                entry.refuses_average_ties(config.options[entry.name], keyword) if config.ties == "average" else None
            )
            if refused:
                raise ValueError(
                    f"{owner}: ties='average' is not available with {refused} for {entry.name!r} "
                    "(the expectation of a ratio of random counts); use ties='stable' or another convention"
                )
        return config

    def value_names(self) -> list:
        """The name of each per-user value: ``"<metric>@<k>"``, then the metrics without cut-off."""
        names = [f"{entry.name}@{k}" for entry in self.entries if entry.has_cutoff for k in self.top_k or ()]
        return names + [entry.name for entry in self.entries if not entry.has_cutoff]

    def gathers(self) -> bool:
        """Whether small CPU batches may be held and ranked together: no metric makes value checks
        beyond those ``gathering.holdable`` reads, and every gain function is a built-in one."""
        request = self.request()
        custom_gain = request is not None and any(callable(gain) for gain in request.gain_functions)
        return not custom_gain and all(entry.checks is None for entry in self.entries)

    def request(self) -> Optional[RankingRequest]:
        return ranking_request(self.entries, self.options, self.top_k, self.relevance_threshold, self.ties)

    def evaluate(self, batch: RankingInput, request: Optional[RankingRequest], hints=None) -> tuple:
        """:func:`evaluate_entries` of one batch under this configuration."""
        return evaluate_entries(
            batch, self.entries, self.options, self.top_k, request, self.relevance_threshold, self.ties, hints
        )


class RankingMean(UserMean):
    """The mean over users of ranking metrics computed from one shared ranking step per batch,
    under a :class:`RankingConfig` (``_config``). Its constructor is that of a metric of one
    registry ``entry`` at the cut-offs ``top_k`` (the entry's options as keywords);
    :class:`RPrecision` and :class:`RankingMetrics` have their own, and each builds the metric
    with :meth:`_start` from its checked arguments.

    With cut-offs, the state ``_boundary_ties`` (len(top_k),) counts, per k, the counted users
    whose k-th and (k + 1)-th candidates tie in score (summed on the device). Under
    ``ties="stable"`` the lower item index then decides who is in the top k, which can make a
    metric look better than the model is (a model that scores every item alike gets HR@10 = 1
    when the positive item sits in column 0 of a sampled evaluation); ``compute()`` warns
    (:class:`BoundaryTieWarning`) with the share of such users and points to ``ties="average"``.

    A class that sets ``_ignite_sums_key`` is a drop-in for ignite's ``rec_sys`` class of its
    name: ignite's NotComputableError text, and ``load_state_dict`` of a state dict saved by
    ignite's class (its per-k sums and ``_num_examples`` become this metric's state)."""

    _parameter_constraints = {
        "top_k": V.TOP_K,
        "ignore_zero_hits": V.BOOLEAN,
        "skip_users_without_relevant": V.Custom(
            "a bool or None (the same setting as ignore_zero_hits)",
            lambda name, value, arguments: None if value is None else V.BOOLEAN.check(name, value, arguments),
            (1, "yes"),
        ),
        "relevance_threshold": V.positive_real(optional=True),
        "ties": V.Options(V.TIE_RULES),
        "num_items": V.catalog_size(optional=True),
        "num_threads": V.positive_int(optional=True),
    }
    optional_output_keys = ("exclude",)  # a dict output {"y_pred", "y", "exclude"} passes its exclusion
    entry: Optional[RankingEntry] = None  # the registry entry of a class of one metric
    _option_keyword = "name"  # how errors name an option: its class keyword, or RankingMetrics' "argument"
    _ignite_sums_key: Optional[str] = None  # the name of ignite's per-k sums in its state dict
    _ignite_count_key = "_num_examples"
    top_k: Optional[list] = None
    _config: RankingConfig

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "entry" in vars(cls) and cls.entry is not None:
            cls._parameter_constraints = {
                **vars(cls).get("_parameter_constraints", {}),
                **{option.name: option.checked_by for option in cls.entry.options},
            }
        # the constructor's own arguments, then the common keywords and the options it does not name
        named = set(inspect.signature(cls.__init__).parameters)
        keywords = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, (default, annotation) in RANKING_KEYWORDS.items()
            if name not in named
        ]
        signature = with_parameters(cls.__init__, keywords + cls._option_parameters(tuple(named)))
        cls.__signature__ = signature  # type: ignore[attr-defined]

    @classmethod
    def _option_parameters(cls, named: tuple) -> list:
        return option_parameters([cls.entry], skip=named) if cls.entry is not None else []

    @V.checks_constructor
    def __init__(
        self,
        top_k: Union[int, Sequence[int]],
        ignore_zero_hits: bool = True,
        relevance_threshold: Optional[float] = 1.0,
        output_transform: Callable = _identity,
        device: Union[str, torch.device] = torch.device("cpu"),
        skip_unrolling: bool = False,
        **keywords: Any,
    ):
        self._start_entry(self._arguments)

    def _start_entry(self, arguments: Mapping) -> None:
        """:meth:`_start` for the class's one registry ``entry``, under its options in ``arguments``."""
        assert self.entry is not None
        options = {option.name: arguments[option.name] for option in self.entry.options}
        self._start(arguments, [self.entry], {self.entry.name: options})

    def _start(self, arguments: Mapping, entries: Sequence[RankingEntry], options: Mapping) -> None:
        """Build the metric from its checked ``arguments``: its configuration, each argument as an
        attribute (``top_k``, ``ties``, the options, ...), the ranking request and the state."""
        self._config = RankingConfig.of(type(self).__name__, arguments, entries, options, self._option_keyword)
        for name, value in arguments.items():
            if name not in _MACHINERY:
                setattr(self, name, value)
        self.ignore_zero_hits = self.skip_users_without_relevant = self._config.ignore_zero_hits
        self._names = self._config.value_names()
        self._request = self._config.request()
        self._hints = RankingHints()
        self._gathers = self._config.gathers()
        if self.top_k is not None:
            self.add_state("_boundary_ties", (len(self.top_k),))
        super().__init__(
            arguments["output_transform"],
            arguments["device"],
            arguments["skip_unrolling"],
            per_user=arguments["per_user"],
            num_groups=arguments["num_groups"],
        )

    def _num_values(self) -> int:
        return len(self._names)

    def _normalized(self, configuration) -> dict:
        """``ignore_zero_hits`` and ``skip_users_without_relevant`` (one setting, two names) as
        one ``ignore_zero_hits``: the value given to either."""
        configuration = dict(configuration)
        alias = configuration.pop("skip_users_without_relevant", "None")
        if alias != "None":
            configuration["ignore_zero_hits"] = alias
        return configuration

    def _thread_setting(self):
        """One thread but for the passes over the whole inputs, or ``num_threads`` for all
        (``tuning.ranking_threads``)."""
        return ranking_threads(self._config.num_threads)

    # Inputs ------------------------------------------------------------------------------------
    def _parse(self, output: Any) -> RankingInput:
        batch = parse_ranking_input(output, num_items=self._config.num_items, user_tags=True)
        if not self._inputs_looked_at:
            self._inputs_looked_at = True
            raw = output[0] if isinstance(output, (tuple, list)) and output else None
            warn_if_suspicious(raw if isinstance(raw, torch.Tensor) else None, batch.labels)
        return batch

    def reset(self) -> None:
        super().reset()
        self._held = HeldBatches()

    # Small CPU batches, ranked together (``_core.gathering``) -----------------------------------
    def _hold(self, inputs: RankingInput) -> bool:
        if not self._gathers or self._device.type != "cpu" or not holdable(inputs):
            return False
        self._check_user_tags(inputs.groups, inputs.users)  # what the batch's own step would refuse
        scores, labels = inputs.scores, inputs.labels
        assert scores is not None and labels is not None  # holdable: a dense pair
        if not self._held.accepts(scores, labels):
            self._apply_held()
        self._held.hold(scores, labels)
        if self._held.full():
            self._apply_held()
        return True

    def _apply_held(self) -> None:
        """Rank the held batches as one, then add each batch's users to the state as its own
        update would have (the same sums in the same order: the same state to the last bit)."""
        held = self._held.take()
        if held is None:
            return
        batch, sizes = held
        values, weight, invalid, ties = self._user_columns(batch)
        raise_if_invalid(invalid)  # never set: only batches that pass these checks are held
        self._add_in_pieces(self._rows(batch, values, weight, {}, ties), sizes)

    def _empty_message(self) -> str:
        threshold = self._config.relevance_threshold
        relevant = "y > 0" if threshold is None else f"y >= relevance_threshold={threshold:g}"
        # ignite's text first (a drop-in), then why no user was counted
        counted = "example (a counted user)" if self._ignite_sums_key else "counted user"
        return (
            f"{type(self).__name__} must have at least one {counted} before compute(): with "
            f"ignore_zero_hits=True (skip_users_without_relevant) users without a relevant item are not counted, "
            f"and an item is relevant when {relevant}. Labels in (0, 1) need relevance_threshold=None "
            "(or a lower threshold); ignore_zero_hits=False counts such users as 0."
        )

    # One batch ---------------------------------------------------------------------------------
    def _user_rows(self, batch: RankingInput) -> UserRows:
        return self._rows(batch, *self._user_columns(batch))

    def _user_columns(self, batch: RankingInput) -> tuple:
        """(values (batch, num_values), weight (batch,), value checks, boundary tie columns or None)."""
        columns, has_relevant, invalid, ties = self._config.evaluate(batch, self._request, self._hints)
        if self._config.ignore_zero_hits:
            weight = has_relevant.to(torch.float64)
        else:
            weight = torch.ones(has_relevant.shape, dtype=torch.float64, device=has_relevant.device)
        return torch.cat(columns, 1), weight, invalid, ties

    def _rows(self, batch: RankingInput, values, weight, invalid: dict, ties) -> UserRows:
        """The ``UserRows`` of users of ``batch``, with the counted users' boundary ties."""
        extra = {}
        if self.top_k is not None:
            extra["_boundary_ties"] = (
                weight @ ties
                if ties is not None
                else torch.zeros(len(self.top_k), dtype=torch.float64, device=weight.device)
            )
        return UserRows(values, weight, invalid, extra, batch.groups, batch.users)

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
        if self.top_k is not None and self._config.ties == "stable":
            shares = self.boundary_tie_share()
            if any(share > 0 for share in shares):
                listed = ", ".join(f"k={k}: {share:.1%}" for k, share in zip(self.top_k, shares) if share > 0)
                warn_user(
                    f"{type(self).__name__}: tied scores across the cut-off ({listed} of users); the lower item "
                    "index decides which is in the top k. Pass ties='average', or break the ties in the scores.",
                    BoundaryTieWarning,
                )
        return result

    # A state dict of ignite's class ------------------------------------------------------------
    def load_state_dict(self, state_dict: Mapping) -> None:
        """Load a state dict of this class, or, for a drop-in of ignite's class, one saved by
        ignite's class of the same name (with the same ``top_k``: only their number can be
        checked), then go on updating."""
        super().load_state_dict(self._from_ignite(state_dict) if self._ignite_sums_key else state_dict)
        self._held.clear()  # batches held before the load are replaced by the loaded state

    def _from_ignite(self, state_dict: Any) -> Any:
        if not isinstance(state_dict, Mapping) or len(state_dict) != 1:
            return state_dict  # not a state dict of either class: the base class says why
        ((outer_key, per_rank),) = state_dict.items()
        if not isinstance(per_rank, (list, tuple)):
            return state_dict
        is_ignite = [isinstance(entry, Mapping) and self._ignite_sums_key in entry for entry in per_rank]
        if not any(is_ignite):
            return state_dict
        translated = [self._ignite_entry(entry) if ignite else entry for entry, ignite in zip(per_rank, is_ignite)]
        return {outer_key: translated}

    def _ignite_entry(self, entry: Mapping) -> dict:
        name, top_k = type(self).__name__, list(self.top_k or ())
        if self.num_groups is not None:
            raise ValueError(
                f"{name}: an ignite state dict has no per-group sums; load it into a metric built without num_groups"
            )
        if self._ignite_count_key not in entry:
            raise ValueError(f"{name}: the ignite state dict lacks {self._ignite_count_key!r}, got keys {list(entry)}")
        sums, count = entry[self._ignite_sums_key], entry[self._ignite_count_key]
        if not isinstance(sums, torch.Tensor) or sums.shape != (len(top_k),) or not sums.is_floating_point():
            shape = tuple(sums.shape) if isinstance(sums, torch.Tensor) else type(sums).__name__
            raise ValueError(
                f"{name}: the ignite state dict's {self._ignite_sums_key!r} must be a float tensor of one sum "
                f"per cut-off, shape ({len(top_k)},) for top_k={top_k}, got {shape}"
            )
        if isinstance(count, torch.Tensor) and count.numel() == 1:
            count = count.item()
        if isinstance(count, bool) or not isinstance(count, (int, float)) or not count >= 0:
            raise ValueError(
                f"{name}: the ignite state dict's {self._ignite_count_key!r} must be a count >= 0, got {count!r}"
            )
        state = dict(self._state_dict_per_rank())  # this class's format, with every key it needs (no configuration)
        state["_sum"] = sums.detach().to(device=self._device, dtype=torch.float64, copy=True)
        state["_count"] = torch.tensor(float(count), dtype=torch.float64, device=self._device)
        state["_num_invalid_updates"] = torch.zeros((), dtype=torch.float64, device=self._device)
        # ignite keeps no sums of squares: confidence_interval() says so instead of guessing
        state["_sum_squares"] = torch.full((len(top_k),), torch.nan, dtype=torch.float64, device=self._device)
        state["_shift"] = torch.zeros((len(top_k),), dtype=torch.float64, device=self._device)
        state["_sum_deviations"] = state["_sum"].clone()  # about the shift 0
        return state
