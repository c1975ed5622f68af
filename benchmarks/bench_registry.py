"""Time the update of every ranking metric of the registry, one class at a time, in the input forms
that take the ranking step's other paths, as ratios to ``torch.topk(scores, 100)`` on the same
scores in the same run.

Data: B users x N items, float32 scores with ties (values rounded to 1/1000), 20 relevant items
per user with grades 1-3; top_k = [10, 100] (``--top-k``; R-Precision has no cut-off). Forms:

- ``dense``: dense scores and labels;
- ``dense+exclude``: the same with 50 excluded items per user as a dense bool mask;
- ``ids``: dense scores, the relevant items as ``ItemIds`` (ids and grades);
- each also under ``ties="average"`` for the metrics that accept it (``--ties average``).

Rounds are interleaved (``bench_forms.interleaved``): median seconds, the ratio of medians to
``torch.topk`` and the spread of the per-round ratios.

    python benchmarks/bench_registry.py [--items 100000] [--batch 256] [--rounds 5] [--top-k 10 100]
                                        [--forms dense dense+exclude ids] [--ties stable average]
"""

from __future__ import annotations

import argparse
import platform

import torch

from bench_forms import interleaved, load_average, print_rows  # noqa: E402  (same folder)

TOP_K = [10, 100]


def make_inputs(batch, items, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = (torch.rand(batch, items, generator=generator) * 1000).round() / 1000  # ties
    ids = torch.rand(batch, items, generator=generator).argsort(1)[:, :70]
    relevant, excluded = ids[:, :20], ids[:, 20:]
    grades = torch.randint(1, 4, relevant.shape, generator=generator).float()
    labels = torch.zeros(batch, items).scatter_(1, relevant, grades)
    mask = torch.zeros(batch, items, dtype=torch.bool).scatter_(1, excluded, True)
    return scores, labels, mask, relevant, grades


def main(argv=None):
    import ignite_recsys as R
    from ignite_recsys._registry import ENTRIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--forms", nargs="+", default=["dense", "dense+exclude", "ids"])
    parser.add_argument("--ties", nargs="+", default=["stable", "average"])
    parser.add_argument("--top-k", type=int, nargs="+", default=TOP_K, help="the cut-offs of every metric")
    args = parser.parse_args(argv)
    top_k = sorted(args.top_k)

    scores, labels, mask, relevant, grades = make_inputs(args.batch, args.items)
    outputs = {
        "dense": (scores, labels),
        "dense+exclude": (scores, labels, mask),
        "ids": (scores, R.ItemIds(relevant, grades)),
    }
    print(
        f"B={args.batch} N={args.items:,} top_k={top_k}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.machine()}, load average {load_average()}"
    )
    for ties in args.ties:
        for form in args.forms:
            output = outputs[form]
            candidates = {"torch.topk(100)": lambda: torch.topk(scores, 100)}
            for entry in ENTRIES:
                if ties == "average" and not entry.average_ties:
                    continue
                cls = getattr(R, entry.class_name)
                metric = cls(ties=ties) if not entry.has_cutoff else cls(top_k, ties=ties)

                def update(metric=metric):
                    metric.reset()
                    metric.update(output)

                candidates[cls.__name__] = update
            rows = interleaved(candidates, args.rounds, "torch.topk(100)")
            print_rows(f"{form}, ties={ties!r}", rows, "torch.topk")
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
