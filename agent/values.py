"""How one setting's value is read and checked: the parsers `agent.config` declares settings with.

A parser takes the value the user gave (`Raw`: a string from the environment, or whatever
YAML made of the config.yaml entry, with the name a message uses for it) and returns the
checked value, or raises `ConfigError` with one line, `<SETTING>: <what is wrong>`. The
factories (`integer`, `seconds`) bind a setting's bounds once, where it is declared; their
parsers carry those bounds as `shown_range`, the text the README's settings table gives.

A message never repeats what the user gave: a token pasted into the wrong variable, or a
URL holding a key, would reach the logs of whoever runs the agent. It says what was
expected and what kind of value, of what length, was given (`describe`).
"""

from __future__ import annotations

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
    """What kind of value the user gave, for messages: never the value itself."""
    if isinstance(value, str):
        return f"{len(value)} character{'' if len(value) == 1 else 's'} (not shown)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number with a fraction" if math.isfinite(value) else "an infinite number"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class Bounded:
    """A parser of numbers between two bounds (or of one of a few words, `choice`, or of a
    flag, `switch`);
    `shown_range` is how the README writes them,
    `show` how it writes a value of the setting (its default), `schema` how the chart's
    values schema bounds them."""

    parse: Callable[[Raw], Any]
    shown_range: str
    schema: dict[str, Any]
    show: Callable[[Any], str] = lambda value: _plain(value)

    def __call__(self, raw: Raw) -> Any:
        return self.parse(raw)


def integer(*, minimum: int, maximum: int) -> Bounded:
    """A whole number from `minimum` to `maximum`."""
    shown = f"{minimum} to {maximum}"

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
            raise error(raw, f"expected an integer from {shown}, got {describe(value)}")
        if not minimum <= number <= maximum:
            raise error(raw, f"must be from {shown}, got {_side(number, minimum)}")
        return number

    return Bounded(parse, shown, {"type": "integer", "minimum": minimum, "maximum": maximum})


def seconds(*, minimum: float, maximum: float, zero_is_off: bool = False) -> Bounded:
    """A duration in seconds from `minimum` to `maximum`; also 0 when `zero_is_off`.

    The floor keeps a period from turning a loop into a busy one (a heartbeat every
    millisecond), the ceiling keeps a typo from silencing it for years."""
    shown = f"{_plain(minimum)} to {_plain(maximum)}" + (", or 0 (off)" if zero_is_off else "")

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
            raise error(raw, f"expected a number of seconds from {shown}, got {describe(value)}")
        if zero_is_off and number == 0:
            return 0.0
        if not minimum <= number <= maximum:
            raise error(raw, f"must be from {shown}, got {_side(number, minimum)}")
        return number

    schema: dict[str, Any] = {"type": "number", "minimum": minimum, "maximum": maximum}
    if zero_is_off:
        schema = {"anyOf": [{"const": 0}, schema]}
    return Bounded(parse, shown, schema)


def choice(*options: str) -> Bounded:
    """One of `options`, as written (case aside)."""
    shown = ", ".join(options)

    def parse(raw: Raw) -> str:
        value = raw.value.strip().lower() if isinstance(raw.value, str) else None
        if value not in options:
            raise error(raw, f"expected one of {shown}, got {describe(raw.value)}")
        return value

    return Bounded(
        parse, shown, {"type": "string", "enum": list(options)}, show=lambda value: f"`{value}`"
    )


def doubled_range(*, minimum: int, maximum: int) -> Bounded:
    """A whole number of seconds N from `minimum` to `maximum`, read as the range N to 2N
    (a time drawn at random in it spreads reconnections out, as client-go does)."""
    single = integer(minimum=minimum, maximum=maximum)

    def parse(raw: Raw) -> tuple[int, int]:
        low: int = single(raw)
        return (low, 2 * low)

    return Bounded(parse, single.shown_range, single.schema, show=lambda value: _plain(value[0]))


def _plain(number: float) -> str:
    """`2592000`, `0.1`: as a person writes it, never `2.592e+06`."""
    return str(int(number)) if number == int(number) else str(number)


def _side(number: float, minimum: float) -> str:
    # Which side of the range, not the number: a pasted secret can be all digits.
    return "less" if number < minimum else "more"


def flag(raw: Raw) -> bool:
    parsed = _parse_flag(raw.value)
    if parsed is None:
        raise error(raw, f"expected true or false, got {describe(raw.value)}")
    return parsed


def switch() -> Bounded:
    """A flag (`flag`) that the chart's `config.extra` may set, as a YAML boolean."""
    return Bounded(flag, "", {"type": "boolean"}, show=lambda value: f"`{str(value).lower()}`")


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
    for index, item in enumerate(items, start=1):
        if any(char.isspace() for char in item):
            raise error(raw, f"entry {index} contains whitespace")
    return tuple(dict.fromkeys(items))  # drop repeats, keep the order


def _list_item(raw: Raw, index: int, item: object) -> str:
    if not isinstance(item, str) or not item.strip():
        raise error(raw, f"entry {index}: expected a non-empty string, got {describe(item)}")
    return item.strip()


def resource_globs(raw: Raw) -> tuple[str, ...]:
    globs = names(raw)
    for index, entry in enumerate(globs, start=1):
        try:
            resource_glob.parse(entry)  # the one reading of a glob, every role's
        except ValueError as exc:
            raise error(raw, f"entry {index}: {exc}") from None
    return globs


def ca_bundle(raw: Raw) -> str:
    """A PEM file of CAs that Python's TLS can load; messages name the setting, not the path."""
    file = path(raw)
    if not os.path.exists(file):
        raise error(raw, "the file does not exist")
    if not os.path.isfile(file):
        raise error(raw, "is not a file")
    try:
        ssl.create_default_context(cafile=file)
    except ssl.SSLError as e:  # before OSError: it is one
        raise error(raw, f"holds no usable PEM certificate ({e.reason or 'unreadable'})") from None
    except OSError as e:
        raise error(raw, f"cannot be read ({e.strerror or 'error'})") from None
    return file
