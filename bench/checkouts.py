"""Two commits' sources side by side, for the benches that compare them in one run.

`Sources` is one tree of the project's packages: this checkout, or another commit checked
out in a scratch worktree (`worktree`). A process started with `Sources.env`, in a
directory that is not a checkout (else that directory comes first on the path), imports the
project from that tree and everything else from what is installed here.

How it fails: a REV git cannot check out, or a tree whose `agent` imports from somewhere
else (an installed copy shadowing it), ends the bench with a line saying so.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from collect import child_env

CHECKOUT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sources:
    name: str
    root: Path
    commit: str  # short hash, `+changes` when the tree differs from it
    env: dict[str, str]  # the bench's child environment, the tree first on PYTHONPATH


def git(root: Path, *argv: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def worktree(rev: str, scratch: Path) -> Iterator[Path]:
    """The commit checked out in `scratch`, removed again afterwards."""
    path = scratch / "against-sources"
    git(CHECKOUT, "worktree", "add", "--detach", "--quiet", str(path), rev)
    try:
        yield path
    finally:
        git(CHECKOUT, "worktree", "remove", "--force", str(path))


def sources(name: str, root: Path, *, cwd: Path, env: dict[str, str] | None = None) -> Sources:
    """The tree at `root`, checked to be the one a process started in `cwd` imports."""
    changed = git(root, "status", "--porcelain", "--untracked-files=no")
    commit = git(root, "rev-parse", "--short", "HEAD") + ("+changes" if changed else "")
    tree_env = child_env({**(env or {}), "PYTHONPATH": str(root)})
    where = subprocess.run(
        [sys.executable, "-c", "import agent; print(agent.__file__)"],
        env=tree_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{name}: `agent` imports from {where}, not from {root}")
    return Sources(name=name, root=root, commit=commit, env=tree_env)
