"""The container image: its Dockerfile read as Docker reads it, and its install reproduced.

No container engine runs in CI, so the image is checked in two halves.

First the Dockerfile is parsed (instructions, line continuations, comments, stages, global
ARGs) and its facts are held against the project and the chart: one pinned slim Python
base that satisfies requires-python, a build stage that copies every package the
distribution declares, a runtime stage that receives only the venv, the chart's non-root
uid/gid, the entrypoint, and the queue directory the agent defaults to, declared a volume.

Then the install itself is reproduced, offline: a wheel is built (`pip wheel --no-deps
--no-build-isolation --no-index`) from exactly the files the build stage copies, with
.dockerignore applied, and installed with `pip --python VENV install --no-index` into a
fresh venv made `--without-pip`, as the Dockerfile's venv stage does. Its dependencies cannot
come from PyPI here, and rebuilding wheels of installed distributions is not possible offline,
so each requirement the wheel declares (and theirs, transitively) is taken from the test
environment: the files of those distributions alone are linked into the fresh venv, after
checking that the installed versions satisfy the declared ranges. Nothing else of the test
environment is visible there, so a runtime import of an undeclared package fails here as it
would in the image. `moonin-agent version` and `--help` then run from the venv's bin.
Building the wheel is the slow part (a few seconds); it happens once per module.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from agent import config as agent_config
from agent.demo import EXIT_NO_SANDBOX, NO_SANDBOX
from tests.conftest import PRODUCTION_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CHART_VALUES = ROOT / "helm" / "moonin-agent" / "values.yaml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SANDBOX = ROOT / "sandbox"
SANDBOX_PROJECT = tomllib.loads((SANDBOX / "pyproject.toml").read_text())["project"]
VENV = "/opt/moonin-agent"
COMMAND_TIMEOUT = 180
PIP = (sys.executable, "-m", "pip")


# --- a Dockerfile reader ----------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int

    def exec_form(self) -> list[str]:
        """The JSON array of CMD, ENTRYPOINT, VOLUME, ...; AssertionError for shell form."""
        value = json.loads(self.arguments)
        assert isinstance(value, list), f"line {self.line}: not an exec-form array"
        return value

    def pairs(self) -> dict[str, str]:
        """`ENV`/`LABEL` key=value pairs (quotes honoured), or the legacy `ENV key value`."""
        words = shlex.split(self.arguments)
        if words and "=" not in words[0]:
            return {words[0]: " ".join(words[1:])}
        return dict(word.split("=", 1) for word in words)

    def flags(self) -> tuple[dict[str, str], list[str]]:
        """`--flag=value` options and the remaining words (COPY, ADD, RUN --mount...)."""
        options, rest = {}, []
        for word in shlex.split(self.arguments):
            if word.startswith("--") and not rest:
                key, _, value = word[2:].partition("=")
                options[key] = value
            else:
                rest.append(word)
        return options, rest


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name}: no {keyword}"
        return found[-1]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            values.update(instruction.pairs())
        return values


def parse_instructions(text: str, escape: str = "\\") -> list[Instruction]:
    """Instructions in order. A line ending in the escape character continues on the next;
    comment and blank lines inside a continuation are dropped, as Docker does."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not pending:
            start = number
        body = raw.rstrip()
        if body.endswith(escape):
            pending.append(body[: -len(escape)].strip())
            continue
        pending.append(stripped)
        joined = " ".join(part for part in pending if part)
        pending = []
        keyword, _, arguments = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
    assert not pending, "the file ends inside a line continuation"
    return instructions


def _substitute(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m[1] or m[2], m[0]), text)


def parse_stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, FROM lines resolved against those ARGs."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in parse_instructions(text):
        if instruction.keyword == "FROM":
            words = _substitute(instruction.arguments, global_args).split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            assert instruction.keyword == "ARG", f"line {instruction.line}: before any FROM"
            key, _, default = instruction.arguments.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(instruction)
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    _, parsed = parse_stages(DOCKERFILE.read_text())
    named = {stage.name: stage for stage in parsed}
    assert list(named) == [stage.name for stage in parsed], "every stage is named, once"
    return named


@pytest.fixture(scope="module")
def chart_values() -> dict:
    return yaml.safe_load(CHART_VALUES.read_text())


def test_the_reader_joins_continuations_and_skips_comments() -> None:
    text = (
        "# a comment\n"
        "ARG BASE=python:3.12-slim\n"
        "FROM ${BASE} AS one\n"
        "RUN first \\\n"
        "    # dropped inside a continuation\n"
        "\n"
        "    && second\n"
        'ENV A=1 B="two words"\n'
        'CMD ["x", "y"]\n'
    )
    args, parsed = parse_stages(text)
    assert args == {"BASE": "python:3.12-slim"}
    (stage,) = parsed
    assert (stage.base, stage.name) == ("python:3.12-slim", "one")
    assert stage.last("RUN").arguments == "first && second"
    assert stage.last("RUN").line == 4
    assert stage.env() == {"A": "1", "B": "two words"}
    assert stage.last("CMD").exec_form() == ["x", "y"]


# --- what the Dockerfile says -----------------------------------------------------------------


def test_three_stages_share_one_slim_python_pinned_to_major_minor(
    stages: dict[str, Stage],
) -> None:
    assert list(stages) == ["build", "venv", "runtime"]
    bases = {stage.base for stage in stages.values()}
    assert len(bases) == 1, bases
    (base,) = bases
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(-[a-z]+)?", base)
    assert match, f"{base} is not a slim Python pinned to major.minor"
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert minimum
    assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))


def _top_level_packages() -> list[str]:
    """The top-level packages pyproject.toml ships, listed or found by include patterns."""
    declared = PYPROJECT["tool"]["setuptools"]["packages"]
    if isinstance(declared, dict):  # [tool.setuptools.packages.find]
        declared = declared.get("find", {}).get("include", [])
    return sorted({name.split(".")[0].rstrip("*") for name in declared})


def _copied_sources(stage: Stage) -> list[str]:
    sources = []
    for copy in stage.all("COPY"):
        options, words = copy.flags()
        assert "from" not in options
        sources.extend(word.rstrip("/") for word in words[:-1])
    return sources


def test_the_build_stage_copies_everything_the_distribution_needs(
    stages: dict[str, Stage],
) -> None:
    sources = _copied_sources(stages["build"])
    needed = ["pyproject.toml", PROJECT["readme"], *_top_level_packages()]
    assert sorted(sources) == sorted(needed)
    ignored = [source for source in sources if _ignored(source, _ignore_patterns())]
    assert not ignored, f".dockerignore keeps {ignored} out of the build context"
    assert "pip wheel --wheel-dir /wheels ." in stages["build"].last("RUN").arguments


def test_the_venv_stage_installs_offline_from_the_wheels_alone(stages: dict[str, Stage]) -> None:
    venv = stages["venv"]
    (copy,) = venv.all("COPY")
    assert copy.flags() == ({"from": "build"}, ["/wheels", "/wheels"])
    run = " ".join(i.arguments for i in venv.all("RUN"))
    assert f"python -m venv --without-pip {VENV}" in run
    install = run[run.index("install") :]
    for option in ("--no-cache-dir", "--no-index", "--find-links /wheels", PROJECT["name"]):
        assert option in install
    assert f"--python {VENV}/bin/python" in run


def test_the_runtime_stage_receives_the_venv_and_nothing_built(stages: dict[str, Stage]) -> None:
    runtime = stages["runtime"]
    copies = [c.flags() for c in runtime.all("COPY")] + [a.flags() for a in runtime.all("ADD")]
    assert copies == [({"from": "venv"}, [VENV, VENV])]
    for run in runtime.all("RUN"):
        for word in ("pip", "apt-get", "gcc", "/wheels", "--mount"):
            assert word not in run.arguments, (run.line, word)


def test_the_image_runs_as_the_chart_s_non_root_user(
    stages: dict[str, Stage], chart_values: dict
) -> None:
    runtime = stages["runtime"]
    user = runtime.last("USER").arguments
    assert re.fullmatch(r"\d+:\d+", user), "numeric uid:gid, so runAsNonRoot can verify it"
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0 and gid != 0
    for context in (chart_values["podSecurityContext"], chart_values["securityContext"]):
        assert (context["runAsUser"], context["runAsGroup"]) == (uid, gid)
    assert chart_values["podSecurityContext"]["fsGroup"] == gid
    setup = runtime.all("RUN")[0].arguments
    assert f"--gid {gid}" in setup and f"--uid {uid}" in setup
    # USER comes after every RUN: nothing set up later would belong to root by surprise.
    keywords = [i.keyword for i in runtime.instructions]
    assert "RUN" not in keywords[keywords.index("USER") :]


def test_the_entrypoint_is_the_console_script_on_the_venv_path(stages: dict[str, Stage]) -> None:
    runtime = stages["runtime"]
    assert runtime.last("ENTRYPOINT").exec_form() == [next(iter(PROJECT["scripts"]))]
    assert runtime.last("CMD").exec_form() == ["run", "--role", "discovery"]
    assert runtime.env()["PATH"].split(":")[0] == f"{VENV}/bin"


def test_the_queue_directory_is_the_agent_s_default_a_volume_and_the_user_s(
    stages: dict[str, Stage], chart_values: dict
) -> None:
    runtime = stages["runtime"]
    queue_dir = runtime.env()["QUEUE_DIR"]
    assert queue_dir == agent_config.OutboxSettings.queue_dir == chart_values["queue"]["path"]
    assert queue_dir in runtime.last("VOLUME").exec_form()
    uid, gid = runtime.last("USER").arguments.split(":")
    setup = runtime.all("RUN")[0].arguments
    assert f"--owner={uid}" in setup and f"--group={gid}" in setup and queue_dir in setup


def test_the_runtime_environment(stages: dict[str, Stage]) -> None:
    env = stages["runtime"].env()
    assert env["MALLOC_ARENA_MAX"] == "2"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_the_oci_labels_name_the_project_and_its_version(stages: dict[str, Stage]) -> None:
    runtime = stages["runtime"]
    labels: dict[str, str] = {}
    for label in runtime.all("LABEL"):
        labels.update(label.pairs())
    version_arg = next(a.arguments for a in runtime.all("ARG") if a.arguments.startswith("VERSION"))
    assert version_arg == f"VERSION={PROJECT['version']}", "update the Dockerfile's VERSION"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.title"] == PROJECT["name"]
    assert labels["org.opencontainers.image.licenses"] == PROJECT["license"]


# --- .dockerignore ----------------------------------------------------------------------------


def _ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern: anchored at the context's root, `*` and `?` within one path
    element, `**` across any number of them."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            out.append({"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])))
            i += 1
    return re.compile("".join(out))


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories
    decides, and `!` re-includes."""
    parts = Path(path).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for pattern in patterns:
        regex = _pattern(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not pattern.startswith("!")
    return ignored


def test_dockerignore_keeps_history_environments_caches_and_tests_out() -> None:
    patterns = _ignore_patterns()
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        "agent/__pycache__/cli.cpython-312.pyc",
        "moonin_agent.egg-info/PKG-INFO",
        ".pytest_cache/README.md",
        "tests/integration/test_cli.py",
        "sandbox/kube/fake.py",
        "helm/moonin-agent/values.yaml",
    ):
        assert _ignored(path, patterns), path
    for path in ("agent/cli.py", "pyproject.toml", "README.md"):
        assert not _ignored(path, patterns), path


# --- the install, reproduced ------------------------------------------------------------------


def _run(command: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def _pip_environment(home: Path) -> dict[str, str]:
    # No configuration file, no index and no version check: nothing leaves this machine.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PIP_NO_INDEX": "1",
    }


def _lay_build_context(destination: Path, stage: Stage) -> None:
    """What `COPY` of the build stage would see: its sources, .dockerignore applied."""
    patterns = _ignore_patterns()
    for source in _copied_sources(stage):
        origin = ROOT / source
        if origin.is_file():
            shutil.copy2(origin, destination / source)
            continue
        for path in origin.rglob("*"):
            relative = path.relative_to(ROOT)
            if path.is_file() and not _ignored(str(relative), patterns):
                (destination / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination / relative)


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(name).decode())
    return [Requirement(text) for text in message.get_all("Requires-Dist") or []]


def _dependency_closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions the requirements name, transitively, base extras only."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(requirement, "") for requirement in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(requirement.name)
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{requirement} is declared but not installed in the test environment")
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"installed {dist.name} {dist.version} does not satisfy {requirement}"
        )
        wanted = requirement.extras
        if key in found and not wanted:
            continue
        found[key] = dist
        for text in dist.requires or []:
            nested = Requirement(text)
            pending.append((nested, ""))
            pending.extend((nested, wanted_extra) for wanted_extra in wanted)
    return list(found.values())


def _link_distribution(dist: metadata.Distribution, site_packages: Path) -> None:
    files = dist.files
    assert files is not None, f"{dist.name} lists no files (no RECORD); cannot reuse it"
    for top in {path.parts[0] for path in files}:
        if top in ("..", "__pycache__") or top.endswith(".pth"):
            continue
        origin = Path(str(dist.locate_file(top)))
        target = site_packages / top
        if origin.exists() and not target.exists():
            target.symlink_to(origin)


@dataclass(frozen=True)
class ImageVenv:
    root: Path
    home: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        result = self.attempt(*command)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        return result

    def attempt(self, *command: str) -> subprocess.CompletedProcess[str]:
        # The image's environment, not the test's: no PYTHONPATH, no user site, no work tree.
        environment = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.home),
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "QUEUE_DIR": str(self.home / "queue"),
        }
        return subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            env=environment,
            cwd=self.home,
            check=False,
        )


@pytest.fixture(scope="module")
def image_venv(stages: dict[str, Stage], tmp_path_factory: pytest.TempPathFactory) -> ImageVenv:
    work = tmp_path_factory.mktemp("image")
    context, wheels, root, home = (work / n for n in ("context", "wheels", "venv", "home"))
    for directory in (context, wheels, home):
        directory.mkdir()
    pip_environment = _pip_environment(home)
    _lay_build_context(context, stages["build"])
    _run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", wheels, context],
        env=pip_environment,
        cwd=work,
    )
    (wheel,) = wheels.glob("*.whl")
    offline = ("--no-cache-dir", "--find-links", wheels, PROJECT["name"])
    _run([sys.executable, "-m", "venv", "--without-pip", root], cwd=work)
    _run(
        [*PIP, "--python", root / "bin" / "python", "install", "--no-deps", *offline],
        env=pip_environment,
        cwd=work,
    )
    site_packages = Path(
        _run(
            [
                root / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ]
        ).stdout.strip()
    )
    for dist in _dependency_closure(_requirements(wheel)):
        _link_distribution(dist, site_packages)
    return ImageVenv(root=root, home=home, wheel=wheel)


@pytest.mark.e2e
def test_the_wheel_holds_every_module_of_the_declared_packages(image_venv: ImageVenv) -> None:
    with zipfile.ZipFile(image_venv.wheel) as archive:
        shipped = set(archive.namelist())
    missing = sorted(
        str(path.relative_to(ROOT))
        for top in _top_level_packages()
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts and str(path.relative_to(ROOT)) not in shipped
    )
    assert not missing, (
        f"the wheel (and so the image) lacks {missing}: pyproject.toml's [tool.setuptools] "
        "packages must name every subpackage too"
    )


@pytest.mark.e2e
def test_the_installed_console_script_reports_the_project_version(image_venv: ImageVenv) -> None:
    result = image_venv.run("moonin-agent", "version")
    assert result.stdout.strip() == PROJECT["version"]
    assert (image_venv.bin / "moonin-agent").exists()


@pytest.mark.e2e
def test_the_installed_console_script_lists_its_commands(image_venv: ImageVenv) -> None:
    result = image_venv.run("moonin-agent", "--help")
    for command in ("run", "version", "queue", "scaling", "preview"):
        assert command in result.stdout


@pytest.mark.e2e
def test_the_venv_runs_the_wheel_not_the_work_tree(image_venv: ImageVenv) -> None:
    result = image_venv.run("python", "-c", "import agent.cli; print(agent.cli.__file__)")
    location = Path(result.stdout.strip())
    assert location.is_relative_to(image_venv.root), location
    assert not location.is_relative_to(ROOT)


@pytest.mark.e2e
def test_every_production_module_imports_with_the_declared_dependencies_alone(
    image_venv: ImageVenv,
) -> None:
    script = (
        "import importlib, pkgutil\n"
        f"for name in {PRODUCTION_PACKAGES!r}:\n"
        "    package = importlib.import_module(name)\n"
        "    for module in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        importlib.import_module(module.name)\n"
    )
    image_venv.run("python", "-c", script)


@pytest.mark.e2e
def test_the_test_environment_is_out_of_the_venv_s_reach(image_venv: ImageVenv) -> None:
    # Proves the check above means something: a package only the tests install is missing.
    result = image_venv.attempt("python", "-c", "import pytest")
    assert result.returncode != 0 and "No module named 'pytest'" in result.stderr


# --- the fakes: a distribution of their own, out of the wheel and the image -------------------


@pytest.mark.e2e
def test_the_wheel_holds_none_of_the_fakes(image_venv: ImageVenv) -> None:
    with zipfile.ZipFile(image_venv.wheel) as archive:
        fakes = [name for name in archive.namelist() if name.startswith("sandbox/")]
    assert fakes == []


@pytest.mark.e2e
def test_the_demo_installed_without_the_extra_names_the_extra_in_one_line(
    image_venv: ImageVenv,
) -> None:
    result = image_venv.attempt("moonin-agent", "demo")
    assert result.returncode == EXIT_NO_SANDBOX
    assert result.stderr.splitlines() == [NO_SANDBOX]


@pytest.mark.e2e
def test_the_sandbox_distribution_ships_every_module_of_the_fakes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("sandbox")
    context, wheels = work / "context", work / "wheels"
    shutil.copytree(SANDBOX, context, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", wheels, context],
        env=_pip_environment(work),
        cwd=work,
    )
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.endswith(".py")}
    modules = {
        str(Path("sandbox", path.relative_to(SANDBOX)))
        for path in SANDBOX.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert shipped == modules


def test_the_sandbox_extra_requires_the_fakes_of_the_same_version_and_ranges() -> None:
    (extra,) = (Requirement(text) for text in PROJECT["optional-dependencies"]["sandbox"])
    assert extra.name == SANDBOX_PROJECT["name"]
    assert str(extra.specifier) == f"=={SANDBOX_PROJECT['version']}"
    # A package both need is held to one range, so installing the fakes moves nothing the
    # agent runs on.
    ours = {canonicalize_name(r.name): r for r in map(Requirement, PROJECT["dependencies"])}
    for requirement in map(Requirement, SANDBOX_PROJECT["dependencies"]):
        shared = ours.get(canonicalize_name(requirement.name))
        assert shared is None or shared.specifier == requirement.specifier, requirement
