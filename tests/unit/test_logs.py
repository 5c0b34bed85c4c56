"""Log output: JSON lines or console text, and no secret ever printed, wherever it hides."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import warnings
from collections.abc import Iterator

import pytest
import structlog

from agent.logs import REDACTED, configure_logging

SECRET = "tok-7d41c0aa9e53b1f2"
ROTATED = "tok-0b6e25f8c31d97aa"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    httpx_level = logging.getLogger("httpx").level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(httpx_level)
    logging.captureWarnings(False)


def json_setup(level: str = "debug", secrets: list[str] | None = None) -> io.StringIO:
    stream = io.StringIO()
    held = [SECRET] if secrets is None else secrets
    configure_logging(level, secrets=lambda: held, stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def assert_hidden(stream: io.StringIO, *secrets: str) -> None:
    output = stream.getvalue()
    for secret in secrets or (SECRET,):
        assert secret not in output
    assert REDACTED in output


# --- shape ---------------------------------------------------------------------------------------


def test_a_non_terminal_stream_gets_json_lines_with_event_level_timestamp_and_logger() -> None:
    stream = json_setup()
    structlog.get_logger("shipper").info("stream_paused", stream="discovery", reason="x")

    [line] = lines(stream)
    assert line["event"] == "stream_paused"
    assert line["level"] == "info"
    assert line["logger"] == "shipper"
    assert line["stream"] == "discovery" and line["reason"] == "x"
    assert line["timestamp"].endswith("Z")
    assert "T" in line["timestamp"]


def test_a_terminal_gets_readable_console_text() -> None:
    stream = Terminal()
    configure_logging("info", secrets=lambda: [SECRET], stream=stream)
    structlog.get_logger("collector").info("informer_started", kind="deployment", note=SECRET)

    output = re.sub(r"\x1b\[[0-9;]*m", "", stream.getvalue())  # colours
    assert "informer_started" in output
    assert "kind=deployment" in output
    assert not output.lstrip().startswith("{")
    assert_hidden(stream)


def test_json_can_be_forced_on_a_terminal() -> None:
    stream = Terminal()
    configure_logging("info", secrets=lambda: [], stream=stream, json=True)
    structlog.get_logger().info("hello")
    assert json.loads(stream.getvalue())["event"] == "hello"


def test_events_below_the_level_are_not_written() -> None:
    stream = json_setup("warning")
    log = structlog.get_logger("x")
    log.info("quiet")
    log.warning("loud")
    assert [line["event"] for line in lines(stream)] == ["loud"]


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("verbose", secrets=lambda: [], stream=io.StringIO())


# --- redaction -----------------------------------------------------------------------------------


def test_a_secret_in_a_field_is_redacted() -> None:
    stream = json_setup()
    structlog.get_logger().info("request_failed", url=f"https://x.test/?t={SECRET}")
    assert lines(stream)[0]["url"] == f"https://x.test/?t={REDACTED}"


def test_a_value_too_short_to_be_a_token_does_not_blank_ordinary_text() -> None:
    # A 1-character "token" once turned every "e" of every line into [REDACTED].
    stream = json_setup(secrets=["e", "tok-3f9a1c7", SECRET])
    structlog.get_logger().info("stream_resumed", stream="discovery", detail=f"see {SECRET}")
    [line] = lines(stream)
    assert (line["event"], line["stream"]) == ("stream_resumed", "discovery")
    assert line["detail"] == f"see {REDACTED}"


def test_a_secret_in_the_event_name_is_redacted() -> None:
    stream = json_setup()
    structlog.get_logger().info(f"oops {SECRET}")
    assert_hidden(stream)


def test_a_secret_nested_in_dicts_and_lists_is_redacted() -> None:
    stream = json_setup()
    structlog.get_logger().info(
        "response", body={"errors": [{"detail": f"bad {SECRET}"}], "echo": (SECRET, 3)}
    )
    [line] = lines(stream)
    assert line["body"] == {"errors": [{"detail": f"bad {REDACTED}"}], "echo": [REDACTED, 3]}
    assert_hidden(stream)


def test_a_secret_in_an_exception_message_and_traceback_is_redacted() -> None:
    stream = json_setup()
    try:
        raise RuntimeError(f"header X-Cluster-Token: {SECRET} rejected")
    except RuntimeError:
        structlog.get_logger().exception("send_failed")
    [line] = lines(stream)
    assert "RuntimeError" in line["exception"]
    assert_hidden(stream)


def test_a_secret_inside_an_object_field_is_redacted() -> None:
    stream = json_setup()
    structlog.get_logger().info("failed", error=ValueError(f"token {SECRET}"))
    assert_hidden(stream)


@pytest.mark.parametrize(
    "key", ["token", "cluster_token", "X-Cluster-Token", "Authorization", "db_password", "Secret"]
)
def test_values_of_sensitive_keys_are_redacted_whatever_they_hold(key: str) -> None:
    stream = json_setup(secrets=[])
    structlog.get_logger().info("headers", headers={key: "anything-at-all"}, **{key: "also"})
    [line] = lines(stream)
    assert line[key] == REDACTED
    assert line["headers"] == {key: REDACTED}
    assert "anything-at-all" not in stream.getvalue()


def test_a_rotated_secret_is_redacted_from_its_first_use() -> None:
    held = [SECRET]
    stream = io.StringIO()
    configure_logging("info", secrets=lambda: held, stream=stream)
    log = structlog.get_logger("shipper")
    log.info("before", value=SECRET)
    held.append(ROTATED)  # what a token source does on reload
    log.info("token_reloaded", old=SECRET, new=ROTATED)
    assert_hidden(stream, SECRET, ROTATED)


def test_a_failing_secret_source_still_hides_the_values_it_gave_before() -> None:
    calls = {"n": 0}

    def secrets() -> list[str]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("token file vanished")
        return [SECRET]

    stream = io.StringIO()
    configure_logging("info", secrets=secrets, stream=stream)
    structlog.get_logger().info("first", value=SECRET)
    structlog.get_logger().info("second", value=SECRET)
    assert len(lines(stream)) == 2
    assert_hidden(stream)


# --- the standard library ------------------------------------------------------------------------


def test_stdlib_warnings_are_forwarded_as_redacted_json_lines() -> None:
    stream = json_setup()
    logging.getLogger("persistqueue").warning("cannot open %s with %s", "q", SECRET)
    [line] = lines(stream)
    assert line["event"] == f"cannot open q with {REDACTED}"
    assert line["level"] == "warning"
    assert line["logger"] == "persistqueue"


def test_stdlib_exceptions_are_forwarded_with_the_traceback_redacted() -> None:
    stream = json_setup()
    try:
        raise ConnectionError(f"proxy said {SECRET}")
    except ConnectionError:
        logging.getLogger("kubernetes.client").exception("request failed")
    [line] = lines(stream)
    assert line["level"] == "error"
    assert "ConnectionError" in line["exception"]
    assert_hidden(stream)


def test_stdlib_info_and_httpx_request_lines_are_not_written() -> None:
    stream = json_setup("debug")
    logging.getLogger("persistqueue").info("opened")
    logging.getLogger("httpx").info("HTTP Request: POST https://x.test %s", SECRET)
    assert stream.getvalue() == ""
    assert logging.getLogger("httpx").getEffectiveLevel() >= logging.WARNING


def test_a_stdlib_record_that_cannot_be_formatted_is_dropped_not_echoed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = json_setup()
    root = logging.getLogger()
    # Only ours: pytest's capture handler would raise on this record itself.
    root.handlers[:] = [h for h in root.handlers if type(h).__module__ == "agent.logs"]
    logging.getLogger("lib").warning("%d items", SECRET)
    assert SECRET not in stream.getvalue()
    assert SECRET not in capsys.readouterr().err


def test_python_warnings_go_through_the_same_redaction() -> None:
    stream = json_setup()
    warnings.warn(f"deprecated use of {SECRET}", UserWarning, stacklevel=1)
    assert_hidden(stream)


def test_reconfiguring_does_not_duplicate_stdlib_lines() -> None:
    json_setup()
    stream = json_setup()
    logging.getLogger("lib").warning("once")
    assert [line["event"] for line in lines(stream)] == ["once"]


# --- threads -------------------------------------------------------------------------------------


def test_many_threads_write_whole_lines() -> None:
    stream = json_setup("info")
    log = structlog.get_logger("load")

    def work(worker: int) -> None:
        for index in range(200):
            log.info("tick", worker=worker, index=index, pad="x" * 200, token=SECRET)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    parsed = lines(stream)
    assert len(parsed) == 8 * 200
    assert all(line["token"] == REDACTED for line in parsed)
    assert SECRET not in stream.getvalue()
