"""`moonin-agent scaling evaluate`: output shape and order, `--at`, malformed input, and the
template decoding and timestamp format behind it."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main
from scheduler.templates import (
    MalformedTemplate,
    Template,
    TemplatesError,
    decode_templates,
    format_timestamp,
)

KEYS = ["template_id", "active", "reason", "window_start", "run_until", "error"]
EXAMPLE = {
    "id": "t-1",
    "name": "black friday",
    "enabled": True,
    "valid_until": "2026-12-31T00:00:00Z",
    "timezone": "America/Santiago",
    "cron": "0 8 * * 1-5",
    "duration_minutes": 600,
    "execution": None,
}
NOW = "2026-12-02T12:00:00Z"  # a Wednesday, 09:00 in Santiago
ENDED = "2000-01-01T00:00:00Z"


def write(tmp_path: Path, document: Any) -> str:
    path = tmp_path / "templates.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def evaluate(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> tuple[int, str, str]:
    code = main(["scaling", "evaluate", "--templates", path, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def verdicts(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> list[dict]:
    code, out, err = evaluate(capsys, path, *extra)
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert isinstance(result, list)
    return result


def fails(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> str:
    code, out, err = evaluate(capsys, path, *extra)
    assert code == 2
    assert out == ""
    assert err.startswith("moonin-agent: ")
    assert err.count("\n") == 1
    return err


# --- output -------------------------------------------------------------------------------------


def test_the_contract_example_is_one_array_with_one_object_of_the_fixed_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"templates": [EXAMPLE]})

    (verdict,) = verdicts(capsys, path, "--at", NOW)

    assert list(verdict) == KEYS
    assert verdict == {
        "template_id": "t-1",
        "active": True,
        "reason": "scheduled",
        "window_start": "2026-12-02T11:00:00Z",
        "run_until": "2026-12-02T21:00:00Z",
        "error": None,
    }


def test_every_reason_comes_out_in_input_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    templates = [
        EXAMPLE | {"id": "t-scheduled"},
        EXAMPLE | {"id": "t-disabled", "enabled": False},
        EXAMPLE | {"id": "t-expired", "valid_until": "2026-12-01T00:00:00Z"},
        EXAMPLE | {"id": "t-outside", "cron": "0 20 * * *"},
        EXAMPLE | {"id": "t-invalid", "timezone": "Atlantis/Capital"},
        {
            "id": "t-manual",
            "enabled": True,
            "execution": {
                "id": "x-1",
                "status": "running",
                "started_at": "2026-12-02T10:00:00Z",
                "run_until": "2026-12-02T13:00:00Z",
            },
        },
    ]
    path = write(tmp_path, {"templates": templates})

    result = verdicts(capsys, path, "--at", NOW)

    assert [(v["template_id"], v["active"], v["reason"]) for v in result] == [
        ("t-scheduled", True, "scheduled"),
        ("t-disabled", False, "disabled"),
        ("t-expired", False, "expired"),
        ("t-outside", False, "outside_window"),
        ("t-invalid", False, "invalid"),
        ("t-manual", True, "manual"),
    ]
    assert all(list(verdict) == KEYS for verdict in result)
    assert result[4]["error"] == "unknown time zone 'Atlantis/Capital'"
    assert (result[4]["window_start"], result[4]["run_until"]) == (None, None)
    assert (result[5]["window_start"], result[5]["run_until"]) == (
        "2026-12-02T10:00:00Z",
        "2026-12-02T13:00:00Z",
    )


def test_each_template_is_on_its_own_line_of_the_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"templates": [EXAMPLE, EXAMPLE | {"id": "t-2"}]})

    code, out, _ = evaluate(capsys, path, "--at", NOW)

    assert code == 0
    lines = out.splitlines()
    assert (lines[0], lines[-1], len(lines)) == ("[", "]", 4)


def test_no_templates_is_an_empty_array(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts(capsys, write(tmp_path, {"templates": []}), "--at", NOW) == []


def test_a_fraction_of_a_second_in_an_execution_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    execution = {"status": "running", "started_at": "2026-12-02T10:00:00.25Z", "run_until": None}
    manual = {"id": "t-1", "enabled": True, "duration_minutes": 60, "execution": execution}
    path = write(tmp_path, {"templates": [manual]})

    (verdict,) = verdicts(capsys, path, "--at", "2026-12-02T10:30:00Z")

    assert (verdict["window_start"], verdict["run_until"]) == (
        "2026-12-02T10:00:00.250Z",
        "2026-12-02T11:00:00.250Z",
    )


def test_templates_can_come_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = json.dumps({"templates": [EXAMPLE]}).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload)))

    assert verdicts(capsys, "-", "--at", NOW)[0]["reason"] == "scheduled"


# --- --at -----------------------------------------------------------------------------------------


def test_at_accepts_any_utc_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, {"templates": [EXAMPLE]})

    # 10:59 and 11:00 UTC, written in Santiago's offset.
    assert verdicts(capsys, path, "--at", "2026-12-02T07:59:59-03:00")[0]["active"] is False
    assert verdicts(capsys, path, "--at", "2026-12-02T08:00:00-03:00")[0]["active"] is True


def test_without_at_the_templates_are_evaluated_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    execution = {
        "status": "running",
        "started_at": format_timestamp(now - timedelta(hours=1)),
        "run_until": format_timestamp(now + timedelta(hours=1)),
    }
    templates = [
        {"id": "t-now", "enabled": True, "execution": execution},
        {"id": "t-ended", "enabled": True, "execution": execution | {"run_until": ENDED}},
    ]
    path = write(tmp_path, {"templates": templates})

    result = verdicts(capsys, path)

    assert [(v["template_id"], v["reason"]) for v in result] == [
        ("t-now", "manual"),
        ("t-ended", "outside_window"),
    ]


@pytest.mark.parametrize(
    ("at", "words"),
    [
        ("2026-12-02T12:00:00", "has no UTC offset"),
        ("2026-12-02", "has no UTC offset"),
        ("yesterday", "is not an ISO 8601 date and time"),
        ("2026-13-02T12:00:00Z", "is not an ISO 8601 date and time"),
        ("", "is not an ISO 8601 date and time"),
    ],
)
def test_a_bad_at_is_one_line_and_exit_2(
    at: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"templates": [EXAMPLE]})

    err = fails(capsys, path, "--at", at)

    assert "--at" in err
    assert words in err


# --- malformed input ----------------------------------------------------------------------------


def test_a_missing_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = fails(capsys, str(tmp_path / "nope.json"), "--at", NOW)

    assert "nope.json: cannot read: No such file or directory" in err


def test_a_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "cannot read" in fails(capsys, str(tmp_path), "--at", NOW)


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ("", "not JSON"),
        ("{not json", "not JSON"),
        ('{"templates": [', "not JSON"),
        ("[]", "not a templates document: Expected `object`, got `array`"),
        ("{}", "not a templates document: Object missing required field `templates`"),
        ('{"templates": null}', "templates: Expected `array`, got `null`"),
        ('{"templates": {"id": "t-1"}}', "templates: Expected `array`, got `object`"),
        ('{"templates": [5]}', "templates[0]: no readable id: Expected `object`, got `int`"),
        ('{"templates": [null]}', "templates[0]: no readable id"),
        ('{"templates": [{"id": "t-1", "enabled": true}, {"enabled": true}]}', "templates[1]"),
        ('{"templates": [{"id": 7, "enabled": true}]}', "templates[0]: no readable id: id"),
    ],
)
def test_a_malformed_document_is_one_line_and_exit_2(
    document: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = fails(capsys, write(tmp_path, document), "--at", NOW)

    assert words in err


def test_a_malformed_template_with_an_id_is_reported_invalid_and_the_rest_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    templates = [
        {"id": "t-bad", "enabled": "yes"},
        EXAMPLE,
        {"id": "t-naive", "enabled": True, "valid_until": "2026-12-31T00:00:00"},
    ]
    path = write(tmp_path, {"templates": templates})

    bad, good, naive = verdicts(capsys, path, "--at", NOW)

    assert bad == {
        "template_id": "t-bad",
        "active": False,
        "reason": "invalid",
        "window_start": None,
        "run_until": None,
        "error": "malformed template: enabled: Expected `bool`, got `str`",
    }
    assert good["reason"] == "scheduled"
    assert naive["reason"] == "invalid"
    assert "valid_until" in naive["error"] and "timezone" in naive["error"]


# --- decoding and timestamps --------------------------------------------------------------------


def test_nullable_fields_may_be_missing_and_unknown_fields_are_ignored() -> None:
    (decoded,) = decode_templates(b'{"templates": [{"id": "t-1", "enabled": true, "owner": "x"}]}')

    assert decoded == Template(id="t-1", enabled=True)
    assert decoded.zone_name == "UTC"
    assert (decoded.valid_until, decoded.cron, decoded.duration_minutes) == (None, None, None)
    assert decoded.execution is None


def test_the_contract_example_decodes_with_aware_timestamps() -> None:
    execution = {"id": "x-9", "status": "running", "started_at": "2026-12-02T08:00:00+01:00"}
    payload = json.dumps({"templates": [EXAMPLE | {"execution": execution}]}).encode()

    (decoded,) = decode_templates(payload)

    assert isinstance(decoded, Template)
    assert decoded.zone_name == "America/Santiago"
    assert decoded.valid_until == datetime(2026, 12, 31, tzinfo=UTC)
    assert decoded.execution is not None
    assert decoded.execution.started_at == datetime(2026, 12, 2, 7, tzinfo=UTC)
    assert decoded.execution.run_until is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"enabled": None}, "enabled: Expected `bool`, got `null`"),
        ({"duration_minutes": 90.5}, "duration_minutes: Expected `int | null`, got `float`"),
        ({"duration_minutes": "600"}, "duration_minutes: Expected `int | null`, got `str`"),
        ({"valid_until": "31/12/2026"}, "valid_until: Invalid RFC3339"),
        ({"execution": {"started_at": None}}, "execution: Object missing required field"),
        ({"execution": {"status": "running", "started_at": 5}}, "execution.started_at"),
    ],
)
def test_a_template_of_the_wrong_types_is_malformed_with_the_field_named(
    fields: dict[str, Any], words: str
) -> None:
    payload = json.dumps({"templates": [EXAMPLE | fields]}).encode()

    (decoded,) = decode_templates(payload)

    assert isinstance(decoded, MalformedTemplate)
    assert decoded.id == "t-1"
    assert words in decoded.error


def test_a_document_that_is_not_json_raises_templates_error() -> None:
    with pytest.raises(TemplatesError, match="not JSON"):
        decode_templates(b"\xff")


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 12, 2, 8, tzinfo=UTC), "2026-12-02T08:00:00Z"),
        (datetime(2026, 12, 2, 5, tzinfo=timezone(timedelta(hours=-3))), "2026-12-02T08:00:00Z"),
        (datetime(2026, 12, 2, 8, 0, 0, 250000, tzinfo=UTC), "2026-12-02T08:00:00.250Z"),
        (datetime(2026, 12, 2, 8, 0, 0, 123456, tzinfo=UTC), "2026-12-02T08:00:00.123456Z"),
    ],
)
def test_timestamps_are_utc_with_z_in_whole_seconds_unless_a_fraction_exists(
    moment: datetime, text: str
) -> None:
    assert format_timestamp(moment) == text
