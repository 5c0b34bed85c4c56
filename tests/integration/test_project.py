"""Project hygiene that CI enforces: lint, formatting, strict types and the layer contracts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing_to_fix() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted() -> None:
    result = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_agents_packages_type_check_strictly() -> None:
    # What is checked and how strictly is configured once, in pyproject.toml's [tool.mypy].
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers_hold_collector_and_scheduler_apart_and_nothing_imports_agent() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")  # installed by the test extra
    result = _run(str(lint_imports))
    assert result.returncode == 0, result.stdout + result.stderr
