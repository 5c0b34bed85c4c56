"""How one setting's value is read and checked: the parsers `agent.config` declares settings with.

A parser takes the value the user gave (`Raw`: a string from the environment, or whatever
YAML made of the config.yaml entry, with the name a message uses for it) and returns the
checked value, or raises `ConfigError` with one line, `<SETTING>: <what is wrong>`. The
factories (`integer`, `seconds`) bind a setting's bounds once, where it is declared.
"""

from __future__ import annotations

import json
import math
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kube import globs as resource_glob

LOG_LEVELS = ("debug", "info", "warning", "error")

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})
_SHOWN_CHARS = 60


class ConfigError(Exception):
    """Bad configuration. `str()` is one line: `<SETTING>: <what is wrong>`."""

    def __init__(self, message: str) -> None:
        # One line whatever went in: the CLI prints it as is.
        super().__init__(" ".join(message.splitlines()))


@dataclass(frozen=True)
class Raw:
    """A value the user gave, and the name a message about it uses."""

    value: object
    label: str


Parser = Callable[[Raw], Any]


def error(raw: Raw, problem: str) -> ConfigError:
    return ConfigError(f"{raw.label}: {problem}")


def describe(value: object) -> str:
    """A short, one-line rendering of what the user gave, for messages."""
    if isinstance(value, str):
        text = value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "..."
        return json.dumps(text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def integer(*, minimum: int = 1, maximum: int | None = None) -> Parser:
    """A whole number within the bounds."""

    def parse(raw: Raw) -> int:
        value = raw.value
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                number = None
        if number is None:
            raise error(raw, f"expected an integer, got {describe(value)}")
        if number < minimum:
            raise error(raw, f"must be at least {minimum}, got {number}")
        if maximum is not None and number > maximum:
            raise error(raw, f"must be at most {maximum}, got {number}")
        return number

    return parse


def seconds(*, maximum: float, positive: bool = False) -> Parser:
    """A duration in seconds, not negative (above 0 when `positive`), at most `maximum`."""

    def parse(raw: Raw) -> float:
        value = raw.value
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise error(raw, f"expected a number of seconds, got {describe(value)}")
        if positive and number <= 0:
            raise error(raw, f"must be greater than 0, got {describe(value)}")
        if number < 0:
            raise error(raw, f"must not be negative, got {describe(value)}")
        if number > maximum:
            raise error(raw, f"must be at most {maximum:g}, got {describe(value)}")
        return number

    return parse


def flag(raw: Raw) -> bool:
    parsed = _parse_flag(raw.value)
    if parsed is None:
        raise error(raw, f"expected true or false, got {describe(raw.value)}")
    return parsed


def auto_flag(raw: Raw) -> bool | None:
    """A flag where "auto" (like unset) leaves the decision to the agent."""
    if isinstance(raw.value, str) and raw.value.strip().lower() == "auto":
        return None
    parsed = _parse_flag(raw.value)
    if parsed is None:
        raise error(raw, f"expected true, false or auto, got {describe(raw.value)}")
    return parsed


def _parse_flag(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    return None


def text(raw: Raw) -> str:
    """Taken as given (only the environment carries these, already stripped)."""
    return str(raw.value)


def log_level(raw: Raw) -> str:
    level = raw.value.strip().lower() if isinstance(raw.value, str) else None
    level = "warning" if level == "warn" else level
    if level not in LOG_LEVELS:
        raise error(raw, f"expected one of {', '.join(LOG_LEVELS)}, got {describe(raw.value)}")
    return level


def path(raw: Raw) -> str:
    if not isinstance(raw.value, str) or not raw.value.strip():
        raise error(raw, f"expected a path, got {describe(raw.value)}")
    if "\0" in raw.value:
        raise error(raw, "a path cannot contain a NUL character")
    return raw.value.strip()


def names(raw: Raw) -> tuple[str, ...]:
    """A list from the file, or comma-separated from the environment; replaces the default."""
    value = raw.value
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, list):
        items = [_list_item(raw, index, item) for index, item in enumerate(value, start=1)]
    else:
        raise error(raw, f"expected a list of strings, got {describe(value)}")
    for item in items:
        if any(char.isspace() for char in item):
            raise error(raw, f"entry {describe(item)} contains whitespace")
    return tuple(dict.fromkeys(items))  # drop repeats, keep the order


def _list_item(raw: Raw, index: int, item: object) -> str:
    if not isinstance(item, str) or not item.strip():
        raise error(raw, f"entry {index}: expected a non-empty string, got {describe(item)}")
    return item.strip()


def resource_globs(raw: Raw) -> tuple[str, ...]:
    globs = names(raw)
    for entry in globs:
        try:
            resource_glob.parse(entry)  # the one reading of a glob, every role's
        except ValueError as exc:
            raise error(raw, f"entry {describe(entry)}: {exc}") from None
    return globs


def ca_bundle(raw: Raw) -> str:
    """A PEM file of CAs that Python's TLS can load."""
    file = path(raw)
    if not os.path.exists(file):
        raise error(raw, f"{file} does not exist")
    if not os.path.isfile(file):
        raise error(raw, f"{file} is not a file")
    try:
        ssl.create_default_context(cafile=file)
    except ssl.SSLError as e:  # before OSError: it is one
        raise error(raw, f"{file} holds no usable PEM certificate ({e.reason or e})") from None
    except OSError as e:
        raise error(raw, f"cannot read {file} ({e.strerror or e})") from None
    return file
