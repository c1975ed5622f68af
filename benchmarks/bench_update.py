"""Time one metric update against its peers, on the same data in one process.

Data: float32 scores, binary float32 labels with ~20 relevant items per user, B users per batch,
top_k = [1, 5, 10, 20, 50, 100]. Reported: median seconds and the ratio to `torch.topk(scores, 100)`
alone (median of the per-round ratios, with their spread), and of one read of the scores and labels
(each row's maximum of both: the floor of an exact update); the number of top-level torch
operations of one RankingMetrics update (``top_level_ops``); peak extra resident memory of an
update (in a fresh subprocess, over the inputs already allocated, by resetting Linux's peak-RSS
counter) and its growth over 20 updates. Writes a table to stdout, JSON and a PNG plot:

    python benchmarks/bench_update.py [--sizes 1000 10000 100000 1000000] [--batch 256] [--out benchmarks/results]
    python benchmarks/bench_update.py --load 1 --only-ours   # with one busy process competing for the cores
    python benchmarks/bench_update.py --operations           # operations per update at every batch size and N
    python benchmarks/bench_update.py --runs 3 --markdown    # three runs; the tables of docs/benchmarks.md
    python benchmarks/bench_update.py --under-load --runs 3 --markdown  # idle, num_threads=1, 1 and 4 busy
                                     # processes, and the small-batch stream, in one table (medians of 3 runs)
    python benchmarks/bench_update.py --under-load --sizes     # the small-batch stream alone
    python benchmarks/bench_update.py --loop --runs 3 --markdown  # in an evaluation loop: each call right
                                     # after the forward pass that makes its scores

``--load L`` starts L busy processes (each a pure-Python spin loop on one core, not pinned) before
the timings and stops them after, so every candidate runs under the same load.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import torch

# the library of this checkout, not an installed copy (the script's own folder comes first on sys.path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded from a file path (the tests)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _arguments import whole_number  # noqa: E402  (this folder)

TOP_K = [1, 5, 10, 20, 50, 100]
FLOOR = "one read (row maxima of scores, labels)"


def make_data(batch, items, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch, items, generator=generator)
    return scores, make_labels(batch, items, generator)


def make_labels(batch, items, generator):
    """Binary float32 labels (batch, items), about 20 relevant items per user."""
    return (torch.rand(batch, items, generator=generator) < min(1.0, 20 / items)).float()


# torch's OpenMP workers spin for a while after each multi-threaded operation (libgomp's default
# wait policy: 5-11 ms after a torch.topk on a 2-core machine) on the cores a candidate that runs
# next would take. Each candidate's untimed calls in a round last at least this long, so it is
# timed in its own steady state rather than in what its predecessor left running. What an update
# costs right after a multi-threaded operation is what ``--loop`` measures.
SETTLE_SECONDS = 0.03


def round_times(candidates, repeats, settle=SETTLE_SECONDS):
    """Seconds of each candidate in each round, in steady state. Repeats run in rounds (every
    candidate in each round), so a slow spell of a shared machine affects all candidates alike
    and the ratios hold; within a round each candidate first runs untimed, once and then again
    until ``settle`` seconds have passed since that first call (``SETTLE_SECONDS``), as in an
    epoch of updates: its buffers and caches warm, and no thread its predecessor left spinning."""
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            while time.perf_counter() - start < settle:
                fn()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def median_seconds(candidates, repeats):
    """Median time of each candidate in steady state (``round_times``)."""
    return {name: statistics.median(values) for name, values in round_times(candidates, repeats).items()}


def top_level_ops(fn) -> int:
    """The number of top-level torch operations of one call of ``fn``: the ``aten::`` events of a
    ``torch.profiler`` trace that no other operation encloses (views such as ``slice`` included,
    the kernels an operation calls inside not). The profiler records no Python frames here, so an
    event without a parent is a top-level call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as trace:
        fn()
    return sum(1 for event in trace.events() if event.cpu_parent is None and event.name.startswith("aten::"))


def operation_sweep(sizes, batches=(16, 64, 256, 1024), max_entries=300_000_000):
    """Top-level operations of one RankingMetrics update (six metrics at six cut-offs) at every
    (batch, N) with at most ``max_entries`` scores, and of other configurations at 256 x 100k:
    {label: count}. Each update runs once untimed first (constants are made once per shape)."""
    import ignite_recsys as R

    def count(make, batch, items, form=lambda scores, labels: (scores, labels)):
        scores, labels = make_data(batch, items)
        output = form(scores, labels)
        metric = make()
        metric.update(output)
        return top_level_ops(lambda: metric.update(output))

    six = lambda **options: lambda: R.RankingMetrics(TOP_K, metrics=SIX, **options)  # noqa: E731
    counts = {
        f"B={batch} N={items:,}": count(six(), batch, items)
        for items in sizes
        for batch in batches
        if batch * items <= max_entries
    }
    others = {
        "ties='average'": (six(ties="average"), lambda s, y: (s, y)),
        "bool labels": (six(), lambda s, y: (s, y.bool())),
        "gain_function='binary'": (six(gain_function="binary"), lambda s, y: (s, y)),
        "CSR targets": (six(), lambda s, y: (s, y.to_sparse_csr())),
        "RankedItems + CSR": (six(), lambda s, y: (R.RankedItems(torch.topk(s, 100).indices), y.to_sparse_csr())),
        "exclude CSR (100 per user)": (six(), lambda s, y: (s, y, (torch.rand(s.shape) < 1e-3).to_sparse_csr())),
    }
    for label, (make, form) in others.items():
        counts[f"B=256 N=100,000, {label}"] = count(make, 256, 100_000, form)
    return counts


BUSY_LOOP = "while True:\n    pass\n"


class Load:
    """``with Load(n):`` n busy processes (pure-Python spin loops, one core each, not pinned)
    compete with the timings inside; stopped on exit."""

    def __init__(self, processes: int):
        self.processes = processes
        self.children = []

    def __enter__(self):
        self.children = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(self.processes)]
        if self.children:
            time.sleep(0.5)  # let them reach the loop
        return self

    def __exit__(self, *exc):
        for child in self.children:
            child.kill()
        for child in self.children:
            child.wait()
        self.children = []


SIX = ["ndcg", "hit_rate", "recall", "precision", "map", "mrr"]

# The small-batch stream: RecBole's full-sort test loader on MovieLens-100k (943 users, 1,682
# items) feeds 472 batches of at most 2 users.
STREAM_USERS, STREAM_ITEMS, STREAM_BATCH = 943, 1_682, 2


def stream_candidates(seed=0):
    """torch.topk on every batch of the small-batch stream, and a whole epoch of RankingMetrics
    over it (reset, every update, compute) with the default threads and with num_threads=1."""
    import ignite_recsys as R

    generator = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, STREAM_USERS, STREAM_BATCH):
        rows = min(STREAM_BATCH, STREAM_USERS - start)
        scores = torch.rand(rows, STREAM_ITEMS, generator=generator)
        batches.append((scores, make_labels(rows, STREAM_ITEMS, generator)))

    def topk():
        for scores, _ in batches:
            torch.topk(scores, 100)

    def epoch(**options):
        metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)

        def run():
            metric.reset()
            for batch in batches:
                metric.update(batch)
            with warnings.catch_warnings():  # random scores tie now and then at a cut-off
                warnings.simplefilter("ignore")
                metric.compute()

        return run

    return len(batches), {"torch.topk(100)": topk, "default": epoch(), "num_threads=1": epoch(num_threads=1)}


def per_round_ratios(times, base="torch.topk(100)"):
    """{name: median over rounds of time / base's time in the same round}."""
    return {name: statistics.median(v / b for v, b in zip(values, times[base])) for name, values in times.items()}


def under_load(args):
    """Every row of the speed-under-load table, in one run: per size (``args.sizes``, B =
    ``args.batch``) the ratio of a RankingMetrics update to torch.topk(scores, 100) idle (default
    threads and num_threads=1), with 1 busy process and with 4, and how much each slows with 4
    busy processes against idle; then the small-batch stream. Ratios per round, medians."""
    import ignite_recsys as R

    report = {"load_average_at_start": os.getloadavg()[0], "sizes": {}, "stream": {}}
    print(f"load average at start {report['load_average_at_start']:.2f}; batch {args.batch}; top_k {TOP_K}")

    def size_candidates(scores, labels):
        def ours(**options):
            metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)
            return lambda: metric.update((scores, labels))

        return {
            "torch.topk(100)": lambda: torch.topk(scores, 100),
            "default": ours(),
            "num_threads=1": ours(num_threads=1),
        }

    for items in args.sizes:
        candidates = size_candidates(*make_data(args.batch, items))
        row = {}
        for load in (0, 1, 4):
            with Load(load):
                times = round_times(candidates, args.repeats)
            seconds = {name: statistics.median(values) for name, values in times.items()}
            row[load] = {"ratio": per_round_ratios(times), "seconds": seconds}
        slowdown = {name: row[4]["seconds"][name] / row[0]["seconds"][name] for name in candidates}
        report["sizes"][items] = {"by_load": row, "slowdown_4": slowdown}
        print(
            f"N = {items:>9,}: topk {row[0]['seconds']['torch.topk(100)'] * 1e3:.1f} ms idle; ratio idle "
            f"{row[0]['ratio']['default']:.2f}x (num_threads=1 {row[0]['ratio']['num_threads=1']:.2f}x), "
            f"1 busy {row[1]['ratio']['default']:.2f}x, 4 busy {row[4]['ratio']['default']:.2f}x; slowdown with 4 "
            f"busy: ours {slowdown['default']:.2f}x, topk {slowdown['torch.topk(100)']:.2f}x"
        )
        del candidates
    num_batches, candidates = stream_candidates()
    for load in (0, 1):
        with Load(load):
            times = round_times(candidates, max(3, args.repeats // 2))
        report["stream"][load] = {
            "ratio": per_round_ratios(times),
            "seconds": {k: statistics.median(v) for k, v in times.items()},
        }
        ratio = report["stream"][load]["ratio"]
        print(
            f"stream of {num_batches} batches of <= {STREAM_BATCH} users x {STREAM_ITEMS:,} items, {load} busy: "
            f"topk {report['stream'][load]['seconds']['torch.topk(100)'] * 1e3:.1f} ms, ours "
            f"{ratio['default']:.1f}x (num_threads=1 {ratio['num_threads=1']:.1f}x)"
        )
    return report


# The evaluation loop (``--loop``): each batch's scores come from a forward pass (user vectors
# times the item vectors, on torch's threads) just before the call timed, and its labels from a
# rotating set of batches, as a data loader hands them over: the caches hold what the forward pass
# left, and torch's OpenMP workers keep spinning for a while after it (libgomp's default wait
# policy) on the cores an update's helper thread would take. A second process repeats the
# default update and torch.topk with OMP_WAIT_POLICY=PASSIVE (the workers sleep at once).
LOOP_BATCHES, LOOP_DIM = 4, 64


def loop_times(batch, items, repeats, names=("torch.topk(100)", "default", "num_threads=1"), seed=0):
    """{name: [seconds per round]}: each call timed right after the forward pass that makes its
    scores (``LOOP_BATCHES`` batches in turn); in each round every candidate runs once untimed
    first (its buffers warm; unlike ``round_times``, no settling: each call follows a forward
    pass, whose OpenMP workers spin on)."""
    import ignite_recsys as R

    generator = torch.Generator().manual_seed(seed)
    item_vectors = torch.randn(items, LOOP_DIM, generator=generator)
    batches = [
        (torch.randn(batch, LOOP_DIM, generator=generator), make_labels(batch, items, generator))
        for _ in range(LOOP_BATCHES)
    ]

    def update(**options):
        metric = R.RankingMetrics(TOP_K, metrics=SIX, **options)
        return lambda scores, labels: metric.update((scores, labels))

    calls = {
        "torch.topk(100)": lambda scores, labels: torch.topk(scores, 100),
        "default": update(),
        "num_threads=1": update(num_threads=1),
    }
    step = itertools.count()

    def after_forward(call) -> float:
        users, labels = batches[next(step) % LOOP_BATCHES]
        scores = users @ item_vectors.T
        start = time.perf_counter()
        call(scores, labels)
        return time.perf_counter() - start

    times: dict = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            after_forward(calls[name])
            times[name].append(after_forward(calls[name]))
    return times


def evaluation_loop(args):
    """The evaluation-loop table's rows, per size (``args.sizes``): the ratios of a default and a
    ``num_threads=1`` update to torch.topk in the same loop, and of a default update with
    OMP_WAIT_POLICY=PASSIVE, timed with its own torch.topk in a second process."""
    report = {"load_average_at_start": os.getloadavg()[0], "sizes": {}}
    for items in args.sizes:
        times = loop_times(args.batch, items, args.repeats)
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--loop-child", str(items)]
            + ["--batch", str(args.batch), "--repeats", str(args.repeats)],
            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
            capture_output=True,
            text=True,
            check=True,
        )
        passive = json.loads(child.stdout.strip().splitlines()[-1])
        row = {
            "ratio": per_round_ratios(times),
            "seconds": {name: statistics.median(values) for name, values in times.items()},
            "passive_ratio": per_round_ratios(passive),
            "passive_seconds": {name: statistics.median(values) for name, values in passive.items()},
        }
        report["sizes"][items] = row
        print(
            f"N = {items:>9,}: after the forward pass, topk {row['seconds']['torch.topk(100)'] * 1e3:.2f} ms; "
            f"default {row['ratio']['default']:.2f}x, num_threads=1 {row['ratio']['num_threads=1']:.2f}x; "
            f"OMP_WAIT_POLICY=PASSIVE: topk {row['passive_seconds']['torch.topk(100)'] * 1e3:.2f} ms, "
            f"default {row['passive_ratio']['default']:.2f}x"
        )
    return report


def loop_markdown(reports, command):
    """The evaluation-loop table of docs/benchmarks.md from ``evaluation_loop``'s reports."""
    lines = [header_line(command, len(reports), "", [run["load_average_at_start"] for run in reports])]
    lines += [
        "",
        "| items N | `torch.topk` after the forward pass | default | `num_threads=1` "
        "| `OMP_WAIT_POLICY=PASSIVE`: `torch.topk` | `OMP_WAIT_POLICY=PASSIVE`: default |",
        "|---|---|---|---|---|---|",
    ]
    for items in reports[0]["sizes"]:

        def cell(field, name, items=items) -> str:
            return _ratio([run["sizes"][items][field][name] for run in reports])

        topk = [run["sizes"][items]["seconds"]["torch.topk(100)"] for run in reports]
        passive_topk = [run["sizes"][items]["passive_seconds"]["torch.topk(100)"] for run in reports]
        lines.append(
            f"| {int(items):,} | {_ms(topk)} | {cell('ratio', 'default')} | {cell('ratio', 'num_threads=1')} "
            f"| {_ms(passive_topk)} | {cell('passive_ratio', 'default')} |"
        )
    return "\n".join(lines)


def under_load_markdown(reports, command):
    """The speed-under-load table of docs/benchmarks.md from ``under_load``'s reports (one per run;
    each cell the median over runs, with the range of the runs)."""
    report = reports[0]
    lines = [header_line(command, len(reports), "", [run["load_average_at_start"] for run in reports])]

    def ratio(field) -> str:  # the cell of a value read from each run's report by ``field``
        return _ratio([field(run) for run in reports])

    if report["sizes"]:
        lines += [
            "",
            "| items N | `torch.topk`, no busy process | no busy process, default | no busy process, `num_threads=1` "
            "| 1 busy process | 4 busy processes | slowdown with 4 busy processes: ours / `torch.topk` |",
            "|---|---|---|---|---|---|---|",
        ]
    for items in report["sizes"]:

        def at(load, name, items=items):  # the ratio of ``name`` with ``load`` busy processes, per run
            return lambda run: run["sizes"][items]["by_load"][load]["ratio"][name]

        def slowdown(name, items=items):
            return lambda run: run["sizes"][items]["slowdown_4"][name]

        topk_seconds = [run["sizes"][items]["by_load"][0]["seconds"]["torch.topk(100)"] for run in reports]
        lines.append(
            f"| {int(items):,} | {_ms(topk_seconds)} | {ratio(at(0, 'default'))} | {ratio(at(0, 'num_threads=1'))} | "
            f"{ratio(at(1, 'default'))} | {ratio(at(4, 'default'))} | {ratio(slowdown('default'))} / "
            f"{ratio(slowdown('torch.topk(100)'))} |"
        )
    stream = report["stream"]
    lines += [
        "",
        f"| small-batch stream ({-(-STREAM_USERS // STREAM_BATCH)} batches of <= {STREAM_BATCH} users, "
        f"{STREAM_ITEMS:,} items) | `torch.topk` | default | `num_threads=1` |",
        "|---|---|---|---|",
    ]
    for load in stream:
        label = "no busy process" if int(load) == 0 else f"{load} busy process"
        topk_seconds = [run["stream"][load]["seconds"]["torch.topk(100)"] for run in reports]
        lines.append(
            f"| {label} | {_ms(topk_seconds)} | {ratio(lambda run: run['stream'][load]['ratio']['default'])} | "
            f"{ratio(lambda run: run['stream'][load]['ratio']['num_threads=1'])} |"
        )
    return "\n".join(lines)


def candidates(scores, labels, items, only_ours=False):
    import ignite_recsys as R

    def ours(metric, targets=labels):
        def run():
            metric.reset()
            metric.update((scores, targets))

        return run

    out = {
        "torch.topk(100)": lambda: torch.topk(scores, 100),
        "RankingMetrics (6 metrics x 6 k)": ours(R.RankingMetrics(TOP_K, metrics=SIX)),
        # the same binary labels as bool: NDCG's ideal ranking then needs only the relevant count
        "RankingMetrics, bool labels": ours(R.RankingMetrics(TOP_K, metrics=SIX), labels.bool()),
        # one torch thread during the update (num_threads=1): no wait at each operation for a thread
        # whose core another process holds
        "RankingMetrics, num_threads=1": ours(R.RankingMetrics(TOP_K, metrics=SIX, num_threads=1)),
        # the floor of an exact update: the scores and the labels read once (each row's maximum,
        # on torch's threads); no update can read less
        FLOOR: lambda: (torch.amax(scores, 1), torch.amax(labels, 1)),
    }
    if only_ours:
        return out
    for name in ("NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR"):
        out[f"{name}"] = ours(getattr(R, name)(TOP_K))
    from ignite.metrics.rec_sys import NDCG as IgniteNDCG, HitRate as IgniteHitRate

    out["ignite NDCG"] = ours(IgniteNDCG(TOP_K))
    out["ignite HitRate"] = ours(IgniteHitRate(TOP_K))
    if items <= 100_000:  # at 1M it needs ~19 GB
        from torchmetrics.retrieval import RetrievalNormalizedDCG

        def torchmetrics_epoch():
            metric = RetrievalNormalizedDCG(top_k=100)
            indexes = torch.arange(scores.shape[0]).unsqueeze(1).expand_as(scores)
            metric.update(scores, labels.bool(), indexes=indexes)
            metric.compute()

        out["torchmetrics NDCG (update+compute)"] = torchmetrics_epoch
    try:
        import ranx

        def ranx_top100():
            values, indices = torch.topk(scores, 100)
            run = ranx.Run.from_dict(
                {
                    f"q{u}": {f"d{i}": v for i, v in zip(indices[u].tolist(), values[u].tolist())}
                    for u in range(scores.shape[0])
                }
            )
            rows, cols = labels.nonzero(as_tuple=True)
            qrels_dict = {f"q{u}": {} for u in range(scores.shape[0])}
            for u, i in zip(rows.tolist(), cols.tolist()):
                qrels_dict[f"q{u}"][f"d{i}"] = 1
            qrels = ranx.Qrels.from_dict({q: d for q, d in qrels_dict.items() if d})
            run = ranx.Run.from_dict({q: run[q] for q in qrels.keys()})
            ranx.evaluate(qrels, run, [f"ndcg@{k}" for k in TOP_K])

        out["ranx (top-100 run, inputs built)"] = ranx_top100
    except ImportError:
        pass
    return out


# Functions of the memory probes (run in fresh subprocesses; other benchmark scripts reuse them).
PEAK_HELPERS = r"""
def rss(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field))

def peak_extra(fn):
    # Linux: writing 5 to clear_refs resets the peak resident set size (VmHWM) to the current RSS
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    base = rss("VmRSS:")
    fn()
    return rss("VmHWM:") - base
"""

MEMORY_PROBE = (
    r"""
import sys, os, torch
sys.path.insert(0, os.getcwd())
import ignite_recsys as R
batch, items = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
scores = torch.rand(batch, items, generator=g)
labels = (torch.rand(batch, items, generator=g) < min(1.0, 20 / items)).float()
"""
    + PEAK_HELPERS
    + r"""
metric = R.RankingMetrics([1, 5, 10, 20, 50, 100])
metric.update((scores, labels))  # warm-up: thread pool and allocator caches, as in any epoch
torch.topk(scores, 100)
topk_peak = peak_extra(lambda: torch.topk(scores, 100))
update_peak = peak_extra(lambda: metric.update((scores, labels)))
after_one = rss("VmRSS:")
for _ in range(20):
    metric.update((scores, labels))
assert metric._sum.numel() == 7 * 6  # the state itself never grows (7 metrics x 6 k)
print(update_peak, rss("VmRSS:") - after_one, scores.numel() * 4, topk_peak)
"""
)


def memory(batch, items):
    """Peak extra resident memory of one RankingMetrics update over the inputs already allocated
        (and of torch.topk, for scale), and the RSS growth over
    20 more updates. Linux only."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    # A fixed mmap threshold: glibc then maps every allocation of 64 KiB or more afresh and
    # unmaps it when freed, so the peak RSS counts the update's live buffers, not whatever the
    # allocator happened to keep from earlier frees (without it the reading varies 0-5 MiB).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(batch), str(items)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    extra, growth, one_temporary, topk = map(int, result.stdout.split())
    return {
        "peak_extra_bytes": extra,
        "growth_over_20_updates_bytes": growth,
        "one_BxN_float32_bytes": one_temporary,
        "torch_topk_peak_extra_bytes": topk,
    }


def command_line(script: str, argv) -> str:
    """The command that reproduces a run, for the header line of its Markdown tables."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", script] + [str(a) for a in arguments])


def cpu_name() -> str:
    """The processor's model as Linux reports it (``/proc/cpuinfo``), else the architecture: ratios
    to ``torch.topk`` differ from one processor to another."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return f"{platform.machine()} ({line.split(':', 1)[1].strip()})"
    except OSError:
        pass
    return platform.machine()


def header_line(command: str, runs: int, note: str = "", load_averages=()) -> str:
    """``date, machine, torch, threads, runs, load``, then the command: the line above each table.
    ``load_averages``: the 1-minute load average when each run started (how busy the machine was)."""
    machine = f"{cpu_name()}, {os.cpu_count()} cores"
    runs_text = f"medians of {runs} runs" if runs > 1 else "one run"
    extra = f", {note}" if note else ""
    loads = sorted(float(load) for load in load_averages)
    if loads:
        span = f"{loads[0]:.1f}" if f"{loads[0]:.1f}" == f"{loads[-1]:.1f}" else f"{loads[0]:.1f}–{loads[-1]:.1f}"
        extra += f", load average {span} at the start of {'each run' if len(loads) > 1 else 'the run'}"
    return (
        f"{time.strftime('%Y-%m-%d')}, {machine}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{runs_text}{extra}: `{command}`"
    )


def _number(value):
    return f"{value:.2f}" if value < 10 else f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _ratio(values, unit="x"):
    """``0.93x`` for one run, ``0.93x (0.91–0.95)`` for several: the median of the runs and their range."""
    middle = statistics.median(values)
    if len(values) == 1 or _number(min(values)) == _number(max(values)):
        return f"{_number(middle)}{unit}"
    return f"{_number(middle)}{unit} ({_number(min(values))}–{_number(max(values))})"


def _ms(seconds):
    value = statistics.median(seconds) * 1e3
    return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"


def markdown_tables(runs, command, load=0):
    """The Markdown tables of the Benchmarks page from the reports of ``runs`` (one per run; each
    cell the median over runs of the run's median ratio, with the range of the runs)."""
    sizes = list(runs[0]["sizes"])
    ratios = lambda n, name: [r["sizes"][n]["ratio_to_topk"][name] for r in runs]  # noqa: E731
    note = f"{load} busy process{'es' if load > 1 else ''} competing for the cores" if load else ""
    loads = [run["load_average_at_start"][0] for run in runs if run.get("load_average_at_start")]
    with_memory = any(runs[0]["sizes"][n]["memory"] for n in sizes)
    one_thread = "RankingMetrics, num_threads=1"
    with_one_thread = one_thread in runs[0]["sizes"][sizes[0]]["ratio_to_topk"]
    with_floor = FLOOR in runs[0]["sizes"][sizes[0]]["ratio_to_topk"]
    lines = [
        header_line(command, len(runs), note, loads),
        "",
        "| items N | `torch.topk(scores, 100)` |"
        + (" one read of the scores and labels |" if with_floor else "")
        + " `RankingMetrics` | same, bool labels |"
        + (" same, `num_threads=1` |" if with_one_thread else "")
        + " torch operations |"
        + (" peak extra memory |" if with_memory else ""),
        "|---" * (5 + with_memory + with_one_thread + with_floor) + "|",
    ]
    for n in sizes:
        first = runs[0]["sizes"][n]
        mem = first["memory"]
        memory_cell = ""
        if mem:
            share = mem["peak_extra_bytes"] / mem["one_BxN_float32_bytes"]
            memory_cell = f"{mem['peak_extra_bytes'] / 2**20:.1f} MiB ({share:.2f} of the scores)"
        lines.append(
            f"| {int(n):,} | {_ms([r['sizes'][n]['seconds']['torch.topk(100)'] for r in runs])} | "
            + (f"{_ratio(ratios(n, FLOOR))} | " if with_floor else "")
            + f"{_ratio(ratios(n, 'RankingMetrics (6 metrics x 6 k)'))} | "
            f"{_ratio(ratios(n, 'RankingMetrics, bool labels'))} | "
            + (f"{_ratio(ratios(n, one_thread))} | " if with_one_thread else "")
            + f"{first['ranking_metrics_top_level_ops']} |"
            + (f" {memory_cell} |" if with_memory else "")
        )
    names = ("NDCG", "HitRate", "Recall", "Precision", "MAP", "MRR")
    if names[0] in runs[0]["sizes"][sizes[0]]["ratio_to_topk"]:
        lines += [
            "",
            "Each metric alone, time / `torch.topk(scores, 100)` (same runs):",
            "",
            "| items N | " + " | ".join(f"`{name}`" for name in names) + " |",
            "|---" * (len(names) + 1) + "|",
        ]
        for n in sizes:
            lines.append(f"| {int(n):,} | " + " | ".join(_ratio(ratios(n, name)) for name in names) + " |")
        peers = [
            ("ignite NDCG", "ignite `NDCG`"),
            ("ignite HitRate", "ignite `HitRate`"),
            ("torchmetrics NDCG (update+compute)", "torchmetrics NDCG"),
            ("ranx (top-100 run, inputs built)", "ranx"),
        ]
        lines += [
            "",
            "Other libraries, time / `torch.topk(scores, 100)` (same runs; our `NDCG` for scale):",
            "",
            "| items N | our `NDCG` | " + " | ".join(label for _, label in peers) + " | ignite `NDCG` time / ours |",
            "|---" * (len(peers) + 3) + "|",
        ]
        for n in sizes:
            cells = []
            for key, _ in peers:
                values = [r["sizes"][n]["ratio_to_topk"].get(key) for r in runs]
                cells.append("(skipped)" if None in values else _ratio(values))
            speedup = [r["sizes"][n]["seconds"]["ignite NDCG"] / r["sizes"][n]["seconds"]["NDCG"] for r in runs]
            lines.append(
                f"| {int(n):,} | {_ratio(ratios(n, 'NDCG'))} | " + " | ".join(cells) + f" | {_ratio(speedup)} |"
            )
    return "\n".join(lines)


def operations_markdown(counts, command):
    """The operation counts as two Markdown tables: the six metrics at every (B, N), then the other
    configurations at 256 x 100k."""
    grid, others = {}, {}
    for label, operations in counts.items():
        shape, _, configuration = label.partition(", ")
        batch, items = (part.split("=")[1] for part in shape.split())
        if configuration:
            others[configuration] = operations
        else:
            grid.setdefault(items, {})[int(batch)] = operations
    batches = sorted({b for row in grid.values() for b in row})
    lines = [
        header_line(command, 1, "counts move by a few with the blocks of shared passes the update's thread computes"),
        "",
        "| items N | " + " | ".join(f"B = {b:,}" for b in batches) + " |",
        "|---" * (len(batches) + 1) + "|",
    ]
    for items, row in grid.items():
        lines.append(f"| {items} | " + " | ".join(f"{row[b]}" if b in row else "—" for b in batches) + " |")
    lines += ["", "| configuration, B = 256, N = 100,000 | torch operations |", "|---|---|"]
    lines += [f"| {configuration} | {operations} |" for configuration, operations in others.items()]
    return "\n".join(lines)


def measure(args, with_memory=True):
    """One run: every candidate at every size; returns the report (also printed as text)."""
    import ignite_recsys as R

    machine = (
        f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    load_average = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"machine: {machine}; batch {args.batch}; top_k {TOP_K}; busy processes {args.load}; "
        f"load average at start {load_average}"
    )
    report = {
        "machine": machine,
        "batch": args.batch,
        "top_k": TOP_K,
        "load": args.load,
        "load_average_at_start": load_average,
        "sizes": {},
    }
    for items in args.sizes:
        scores, labels = make_data(args.batch, items)
        all_candidates = candidates(scores, labels, items, only_ours=args.only_ours)
        counted = R.RankingMetrics(TOP_K, metrics=SIX)
        counted.update((scores, labels))  # warm: constants and buffers are made once
        operations = top_level_ops(functools.partial(counted.update, (scores, labels)))
        del counted
        slow = {
            name: fn
            for name, fn in all_candidates.items()
            if name.startswith(("ignite NDCG", "torchmetrics")) and items >= 100_000
        }
        fast = {name: fn for name, fn in all_candidates.items() if name not in slow}
        with Load(args.load):
            times = {**round_times(fast, args.repeats), **round_times(slow, 1)}
        rows = {name: statistics.median(times[name]) for name in all_candidates}
        base = rows["torch.topk(100)"]
        # per-round ratios against torch.topk timed in the same round (the slow ones: against the median)
        ratios = {}
        for name, values in times.items():
            per_round = (
                [v / b for v, b in zip(values, times["torch.topk(100)"])]
                if len(values) == args.repeats
                else [v / base for v in values]
            )
            ratios[name] = (statistics.median(per_round), min(per_round), max(per_round))
        mem = memory(args.batch, items) if with_memory and not args.no_memory else None
        report["sizes"][items] = {
            "seconds": rows,
            "ratio_to_topk": {k: v[0] for k, v in ratios.items()},
            "ratio_spread": {k: v[1:] for k, v in ratios.items()},
            "ranking_metrics_top_level_ops": operations,
            "memory": mem,
        }
        print(
            f"\nN = {items:,}   (torch.topk {base * 1e3:.2f} ms; one RankingMetrics update: "
            f"{operations} top-level torch operations)"
        )
        for name in all_candidates:
            ratio, low, high = ratios[name]
            print(f"  {name:<38} {rows[name] * 1e3:>10.2f} ms {ratio:>8.2f}x topk  ({low:.2f}-{high:.2f})")
        if mem:
            print(
                f"  RankingMetrics update peak extra memory: {mem['peak_extra_bytes'] / 2**20:.1f} MiB "
                f"(one (B,N) float32 = {mem['one_BxN_float32_bytes'] / 2**20:.1f} MiB; torch.topk "
                f"{mem['torch_topk_peak_extra_bytes'] / 2**20:.1f} MiB); "
                f"growth over 20 updates: {mem['growth_over_20_updates_bytes'] / 2**20:.1f} MiB"
            )
        del scores, labels
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description="Benchmark metric updates against peers.")
    parser.add_argument(
        "--sizes",
        type=whole_number(1),
        nargs="*",
        default=None,
        help="items N (default 1k, 10k, 100k, 1M); with --under-load and no N, only the small-batch stream",
    )
    parser.add_argument("--batch", type=whole_number(1), default=256)
    parser.add_argument(
        "--repeats",
        type=whole_number(1),
        default=11,
        help="rounds; the medians of 11 move less between runs on a shared machine than those of 7",
    )
    parser.add_argument(
        "--runs",
        type=whole_number(1),
        default=1,
        help="whole runs, one after the other; the tables give the median of the runs' medians and their range",
    )
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument(
        "--load", type=whole_number(0), default=0, help="busy processes competing for the cores during the timings"
    )
    parser.add_argument(
        "--only-ours",
        action="store_true",
        help="time torch.topk, RankingMetrics and the floor (one read of the scores and labels) only",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory probe")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--under-load",
        action="store_true",
        help="only the speed-under-load table: idle (default and num_threads=1), 1 and 4 busy processes, and "
        "the small-batch stream (default sizes 10k, 100k, 1M)",
    )
    only.add_argument(
        "--loop",
        action="store_true",
        help="only the evaluation-loop table: each call timed right after the forward pass that makes its "
        "scores, with the default wait policy of torch's OpenMP workers and with OMP_WAIT_POLICY=PASSIVE "
        "(default sizes 10k, 100k, 1M)",
    )
    parser.add_argument("--loop-child", type=int, default=None, help=argparse.SUPPRESS)
    only.add_argument(
        "--operations",
        action="store_true",
        help="only count the top-level operations of one update at every batch size and N, and of "
        "other configurations (no timings)",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="end with the Markdown tables of docs/benchmarks.md (date, machine, torch and this "
        "command in the line above them)",
    )
    args = parser.parse_args(argv)
    if args.loop and args.sizes == []:
        parser.error("--loop times updates at the sizes given: --sizes needs at least one N")
    if args.loop_child is not None:  # the second process of --loop: its timings as JSON
        print(json.dumps(loop_times(args.batch, args.loop_child, args.repeats, ("torch.topk(100)", "default"))))
        return None
    if args.sizes is None:
        wide = args.under_load or args.loop
        args.sizes = [10_000, 100_000, 1_000_000] if wide else [1_000, 10_000, 100_000, 1_000_000]
    os.makedirs(args.out, exist_ok=True)
    command = command_line("benchmarks/bench_update.py", argv)
    if args.under_load:
        reports = [under_load(args) for _ in range(args.runs)]
        report = reports[0] if len(reports) == 1 else {**reports[0], "runs": reports}
        if args.markdown:
            print("\n" + under_load_markdown(reports, command))
        with open(os.path.join(args.out, "bench_under_load.json"), "w") as handle:
            json.dump(report, handle, indent=2)
        return report
    if args.loop:
        reports = [evaluation_loop(args) for _ in range(args.runs)]
        if args.markdown:
            print("\n" + loop_markdown(reports, command))
        with open(os.path.join(args.out, "bench_loop.json"), "w") as handle:
            json.dump(reports[0] if len(reports) == 1 else {**reports[0], "runs": reports}, handle, indent=2)
        return reports
    if args.operations:
        counts = operation_sweep(args.sizes)
        for label, operations in counts.items():
            print(f"  {label:<45} {operations:>5} top-level torch operations")
        with open(os.path.join(args.out, "bench_operations.json"), "w") as handle:
            json.dump(counts, handle, indent=2)
        if args.markdown:
            print("\n" + operations_markdown(counts, command))
        return counts

    runs = [measure(args, with_memory=run == 0) for run in range(args.runs)]
    report = runs[0] if len(runs) == 1 else {**runs[0], "runs": runs}
    with open(os.path.join(args.out, "bench_update.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    if args.markdown:
        print("\n" + markdown_tables(runs, command, args.load))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sizes = list(report["sizes"])
        fig, ax = plt.subplots(figsize=(8, 5))
        names = list(report["sizes"][sizes[0]]["ratio_to_topk"])
        for name in names:
            points = [(n, report["sizes"][n]["ratio_to_topk"].get(name)) for n in sizes]
            points = [(n, r) for n, r in points if r is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel("items N"), ax.set_ylabel("time / torch.topk(100)")
        ax.set_title(f"update time relative to torch.topk, B={args.batch}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench_update.png"), dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot")
    return report


if __name__ == "__main__":
    main()
