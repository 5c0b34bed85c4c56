"""Instructions a one-shot listing of the synthetic cluster costs: the warm-up's CPU, counted.

CPU seconds on a shared machine move by a quarter to a third between identical runs, and by
more between days (the default cluster's warm-up took 14.3 s of CPU one day and about 34 s
another, the code unchanged), so two commits compare in seconds only within one sitting
and over several runs. Instruction counts do not move: valgrind's cachegrind counts every
instruction the process executes, the same to within a few parts in ten thousand from run
to run once the hash seed is fixed. One run of each commit is a comparison.

What is counted: `moonin-agent preview` (the collector listing every resource once and
building every record, as a warm-up does, on one thread; no outbox, no shipper; since
`preview` sets them, with the garbage collector's thresholds `run` sets) against the fake
API serving the synthetic cluster (`python -m sandbox.kube --synthetic`, sized as
`bench/collect.py` sizes it), with its records thrown away. Then the interpreter starting
and importing `agent.cli` and `agent.preview` only: `listing` is `total` minus `imports`.
Under valgrind the process runs about 40 times slower: `--small` takes about two minutes,
the default cluster about twenty (two commits at once on two cores).

`--against REV` counts another commit too, in parallel, against the same fake cluster: it
is checked out in a scratch worktree and run from its own sources (first on PYTHONPATH; the
dependencies are the ones installed here), and the change from it to this checkout is
printed last.

How it fails: without valgrind (exit 2), with a REV git cannot check out, or with sources
that do not import from where they should (exit 1), it says so in a line; a listing that
fails shows its log's last lines (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from checkouts import CHECKOUT, sources, worktree
from clusters import FakeCluster, tail
from collect import add_size_arguments, child_env, listed_objects, size_factor, synthetic_sizes

from sandbox.kube.synthetic import SyntheticSpec

IMPORTS = "import agent.cli, agent.preview"
_INSTRUCTIONS = re.compile(rb"I\s+refs:\s+([\d,]+)")
_RECORDS = re.compile(rb'"records": (\d+)')


@dataclass(frozen=True)
class Counted:
    commit: str
    total: int
    imports: int
    listing: int
    records: int
    listing_per_1k_objects: int


class Checkout:
    """One commit's sources and the two processes counted on them."""

    def __init__(self, name: str, root: Path, scratch: Path) -> None:
        self.name = name
        self.scratch = scratch / name
        self.scratch.mkdir()
        # Run in its scratch directory: a checkout's directory would come first on the path.
        tree = sources(name, root, cwd=self.scratch, env={"PYTHONHASHSEED": "0"})
        self.commit = tree.commit
        self.env = tree.env

    def _log(self, what: str) -> Path:
        return self.scratch / f"{what}.valgrind"

    def _stderr(self, what: str) -> Path:
        return self.scratch / f"{what}.stderr"

    def start(self, what: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """`python argv` under cachegrind; its log and stderr in the scratch directory."""
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
        command += ["--cachegrind-out-file=/dev/null", f"--log-file={self._log(what)}"]
        with self._stderr(what).open("wb") as stderr:
            return subprocess.Popen(
                [*command, sys.executable, *argv],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.scratch,
            )

    def instructions(self, what: str, process: subprocess.Popen[bytes]) -> int:
        """The process's instruction count, once it ended well."""
        log = self._log(what)
        if process.wait() != 0:
            failed = tail(self._stderr(what))
            raise SystemExit(f"{self.name}: {what} exited {process.returncode}:\n{failed}")
        found = _INSTRUCTIONS.search(log.read_bytes())
        if found is None:
            raise SystemExit(f"{self.name}: no instruction count in {log}:\n{tail(log)}")
        return int(found.group(1).replace(b",", b""))

    def records(self) -> int:
        """How many records the listing printed, as its last log line says."""
        found = _RECORDS.findall(self._stderr("total").read_bytes())
        return int(found[-1]) if found else 0


def count(checkouts: list[Checkout], kubeconfig: Path, objects: int) -> list[Counted]:
    """Every checkout's listing in parallel, then every checkout's imports."""
    listing = ["-m", "agent.cli", "preview", "--kubeconfig", str(kubeconfig)]
    runs = [(checkout, checkout.start("total", listing)) for checkout in checkouts]
    totals = [checkout.instructions("total", run) for checkout, run in runs]
    runs = [(checkout, checkout.start("imports", ["-c", IMPORTS])) for checkout in checkouts]
    imports = [checkout.instructions("imports", run) for checkout, run in runs]
    return [
        Counted(
            commit=checkout.commit,
            total=total,
            imports=imported,
            listing=total - imported,
            records=checkout.records(),
            listing_per_1k_objects=round((total - imported) * 1000 / objects),
        )
        for checkout, total, imported in zip(checkouts, totals, imports, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser, default_scale="1")
    parser.add_argument("--against", metavar="REV", help="count this commit too, and compare")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        sys.exit(2)
    factor = size_factor(args.scale or 1.0, small=args.small)
    sizes = synthetic_sizes(factor)

    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as directory:
        scratch = Path(directory)
        with contextlib.ExitStack() as stack:
            checkouts = [Checkout("this", CHECKOUT, scratch)]
            if args.against:
                against_root = stack.enter_context(worktree(args.against, scratch))
                checkouts.append(Checkout("against", against_root, scratch))
            print(f"generating the synthetic cluster: {sizes}", flush=True)
            kube = FakeCluster(SyntheticSpec(**sizes), scratch, child_env())
            try:
                objects = listed_objects(kube.counts())
                print(f"{objects} objects of the kinds the agent lists; counting", flush=True)
                counted = count(checkouts, kube.kubeconfig, objects)
            finally:
                kube.close()

    for checkout, figures in zip(checkouts, counted, strict=True):
        print(
            f"{checkout.name} ({figures.commit}): listing {figures.listing / 1e9:.3f} G "
            f"instructions ({figures.listing_per_1k_objects / 1e6:.1f} M per 1,000 objects), "
            f"imports {figures.imports / 1e9:.3f} G, {figures.records} records",
            flush=True,
        )
    this, *against = counted
    change = round(this.listing / against[0].listing - 1, 4) if against else None
    summary = {
        "objects": objects,
        "scale": round(factor, 4),
        "sizes": sizes,
        "this": asdict(this),
        "against": asdict(against[0]) if against else None,
        "listing_change": change,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
