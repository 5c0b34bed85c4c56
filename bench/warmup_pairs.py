"""Warm-up CPU of this checkout against another commit's, alternated in one run.

The machine this runs on changes speed through a day by more than a third, so a warm-up's
CPU compares with another commit's only when the two run close together, several times.
This bench generates the synthetic cluster once (`python -m sandbox.kube --synthetic`,
sized as `bench/collect.py` sizes it) and runs the warm-up that `bench/collect.py`
measures, `--pairs` times for each commit, alternating which goes first (this, REV; REV,
this; ...), each run with a new platform and an empty queue volume. REV is checked out in a
scratch worktree and its agent runs from its own sources (first on PYTHONPATH; the
dependencies are the ones installed here).

Printed per run: the commit, the warm-up's CPU (the kernel's part), peak RSS and what the
agent wrote. Then per commit the mean CPU and the range of peak RSS, and the change of
this checkout's mean CPU from REV's (`cpu_change`, -0.5 is half), with the change within
each pair beside it: a pair's two runs are seconds apart, so their spread says how far the
machine's drift moved the mean. The last line is one JSON object with every run.

    python bench/warmup_pairs.py --against REV [--pairs 3] [--small] [--scale F]

How it fails: a REV git cannot check out, or sources that do not import from where they
should, end it with a line saying so (exit 1); an agent that exits or does not settle in
`--timeout` ends it with the agent's last log lines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

from checkouts import CHECKOUT, Sources, sources, worktree
from clusters import FakeCluster
from collect import (
    Agent,
    Until,
    WarmUp,
    add_settle_arguments,
    add_size_arguments,
    child_env,
    expected_records,
    informer_count,
    size_factor,
    start_platform,
    synthetic_sizes,
    warm_up,
)

from sandbox.kube.synthetic import SyntheticSpec


def one_warm_up(
    kube: FakeCluster, tree: Sources, *, expected: int, until: Until, scratch: Path
) -> WarmUp:
    """A warm-up of the tree's agent, on a new platform and an empty queue volume."""
    scratch.mkdir()
    platform = start_platform(scratch)
    try:
        agent = Agent(platform, kube.kubeconfig, scratch, sources=tree.root)
        try:
            return warm_up(agent, platform, expected=expected, until=until)
        finally:
            agent.stop()
    finally:
        platform.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser, default_scale="1")
    parser.add_argument("--against", metavar="REV", required=True, help="the commit compared")
    parser.add_argument("--pairs", type=int, default=3, help="warm-ups of each commit")
    add_settle_arguments(parser)
    args = parser.parse_args()
    factor = size_factor(args.scale or 1.0, small=args.small)
    sizes = synthetic_sizes(factor)
    until = Until(informers=informer_count(), quiet=args.quiet_seconds, timeout=args.timeout)
    runs: dict[str, list[WarmUp]] = {"this": [], "against": []}

    with tempfile.TemporaryDirectory(prefix="bench-warmup-pairs-") as directory:
        scratch = Path(directory)
        with worktree(args.against, scratch) as against_root:
            trees = [
                sources("this", CHECKOUT, cwd=scratch),
                sources("against", against_root, cwd=scratch),
            ]
            print(f"generating the synthetic cluster: {sizes}", flush=True)
            kube = FakeCluster(SyntheticSpec(**sizes), scratch, child_env())
            try:
                expected = expected_records(kube.counts())
                for pair in range(args.pairs):
                    for tree in trees if pair % 2 == 0 else trees[::-1]:
                        where = scratch / f"{pair}-{tree.name}"
                        warm = one_warm_up(
                            kube, tree, expected=expected, until=until, scratch=where
                        )
                        runs[tree.name].append(warm)
                        print(
                            f"{tree.name} ({tree.commit}): CPU {warm.cpu_seconds:.1f} s "
                            f"({warm.system_cpu_seconds:.1f} s in the kernel), warm-up "
                            f"{warm.seconds:.1f} s, peak RSS {warm.peak_rss_mib:.0f} MiB, "
                            f"{warm.written_mib:.0f} MiB written",
                            flush=True,
                        )
            finally:
                kube.close()

    cpu = {name: [warm.cpu_seconds for warm in done] for name, done in runs.items()}
    mean = {name: statistics.fmean(seconds) for name, seconds in cpu.items()}
    within_pairs = [
        round(this / against - 1, 3)
        for this, against in zip(cpu["this"], cpu["against"], strict=True)
    ]
    for tree in trees:
        peaks = [warm.peak_rss_mib for warm in runs[tree.name]]
        print(
            f"{tree.name} ({tree.commit}): mean CPU {mean[tree.name]:.2f} s, peak RSS "
            f"{min(peaks):.0f}-{max(peaks):.0f} MiB",
            flush=True,
        )
    change = round(mean["this"] / mean["against"] - 1, 3)
    print(f"cpu_change {change} (within each pair: {within_pairs})", flush=True)
    summary = {
        "sizes": sizes,
        "commits": {tree.name: tree.commit for tree in trees},
        "runs": {name: [asdict(warm) for warm in done] for name, done in runs.items()},
        "mean_cpu_seconds": {name: round(value, 2) for name, value in mean.items()},
        "cpu_change": change,
        "cpu_change_within_pairs": within_pairs,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
