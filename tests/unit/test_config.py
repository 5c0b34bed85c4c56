"""Settings from the environment and config.yaml: precedence, defaults, and one-line errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config import (
    DEFAULT_API_URLS,
    ENVIRONMENT,
    FILE_KEYS,
    SETTINGS,
    ConfigError,
    OutboxSettings,
    Setting,
    _edits,
    api_url_for,
    load_settings,
    misspelt_variables,
    split_host_port,
)

TOKEN = "tok-3f9a1c77e2b84d05"


def env(**overrides: str) -> dict[str, str]:
    base = {"PROJECT_ID": "p-1", "CLUSTER_ID": "c-1", "CLUSTER_TOKEN": TOKEN}
    base.update(overrides)
    return {key: value for key, value in base.items() if value is not None}


def config_error(role: str = "discovery", environ: dict[str, str] | None = None, **kw) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(role, env() if environ is None else environ, **kw)
    message = str(caught.value)
    assert "\n" not in message
    return message


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


# --- defaults and roles ------------------------------------------------------------------------


def test_the_chart_minimum_gives_the_documented_defaults() -> None:
    settings = load_settings("discovery", env())

    assert settings.role == "discovery"
    assert (
        settings.identity.project_id,
        settings.identity.cluster_id,
        settings.identity.token,
    ) == ("p-1", "c-1", TOKEN)
    assert settings.identity.token_file is None
    assert api_url_for(settings, "discovery") == "https://api-discover.moonin.app"
    assert settings.api.client.insecure_http is False
    assert settings.api.client.ca_bundle is None
    assert settings.outbox.queue_dir == "/var/lib/moonin-agent/queue"
    assert settings.outbox.bounds.max_records == 1_000_000
    assert settings.outbox.bounds.max_bytes == 400 * 1024 * 1024
    assert settings.outbox.shipping.batch_max_records == 500
    assert settings.outbox.shipping.batch_max_bytes == 1024 * 1024
    assert settings.outbox.shipping.linger_seconds == 0.2
    assert settings.outbox.shutdown_ship_seconds == 10
    assert settings.scaling.reconcile_interval_seconds == 30
    assert settings.process.log_level == "info"
    assert settings.process.health_addr == "0.0.0.0:8080"
    assert settings.filters.ignore_namespaces == ("kube-system",)
    assert settings.filters.ignore_resources == ()
    assert settings.filters.ignore_node_labels == ()
    assert settings.discovery.collector.collect_helm_releases is True
    assert settings.discovery.collector.collect_job_logs is True
    assert settings.discovery.collector.collect_events is True
    assert settings.discovery.leader_election is None
    assert settings.config_file is None
    assert settings.identity.pod_name is None and settings.identity.pod_namespace is None
    assert settings.api.client.deadline_seconds == 30
    assert settings.api.client.max_answer_bytes == 8 * 1024 * 1024
    assert settings.kube.deadline_seconds == 60


def test_the_scaling_role_defaults_to_the_scaling_api() -> None:
    settings = load_settings("scaling", env())
    assert api_url_for(settings, "scaling") == "https://api-scaling-rules.moonin.app"
    assert settings.streams == ("scaling",)


def test_api_url_sets_the_single_role_url_without_a_trailing_slash() -> None:
    settings = load_settings("scaling", env(API_URL="https://scaling.example.test/base/"))
    assert api_url_for(settings, "scaling") == "https://scaling.example.test/base"


def test_a_single_role_cannot_ask_for_the_other_streams_url() -> None:
    settings = load_settings("discovery", env())
    with pytest.raises(ValueError, match="does not ship the scaling stream"):
        api_url_for(settings, "scaling")


def test_a_single_role_accepts_its_own_role_specific_url_too() -> None:
    settings = load_settings("discovery", env(DISCOVERY_API_URL="https://d.example.test"))
    assert api_url_for(settings, "discovery") == "https://d.example.test"


def test_api_url_and_a_different_role_specific_url_conflict() -> None:
    message = config_error(
        environ=env(API_URL="https://a.example.test", DISCOVERY_API_URL="https://b.example.test")
    )
    assert message.startswith("API_URL: conflicts with DISCOVERY_API_URL")


def test_role_all_reads_both_urls_each_with_its_default() -> None:
    settings = load_settings("all", env(SCALING_API_URL="https://s.example.test"))
    assert settings.streams == ("discovery", "scaling")
    assert api_url_for(settings, "discovery") == DEFAULT_API_URLS["discovery"]
    assert api_url_for(settings, "scaling") == "https://s.example.test"


def test_role_all_refuses_api_url_as_a_chart_mistake() -> None:
    message = config_error("all", env(API_URL="https://a.example.test"))
    assert message == (
        "API_URL: ambiguous with --role all; set DISCOVERY_API_URL and SCALING_API_URL"
    )


def test_an_unknown_role_names_the_flag() -> None:
    assert config_error("everything").startswith("--role: expected one of discovery, scaling")


# --- URLs ---------------------------------------------------------------------------------------


def test_plain_http_is_refused_naming_the_variable_that_carried_it() -> None:
    message = config_error("all", env(SCALING_API_URL="http://s.example.test"))
    assert message == (
        "SCALING_API_URL: plain http:// is refused; set MOONIN_INSECURE_HTTP=true to allow "
        "it (never in production)"
    )


def test_plain_http_is_allowed_with_the_insecure_switch() -> None:
    settings = load_settings(
        "discovery", env(API_URL="http://127.0.0.1:8081", MOONIN_INSECURE_HTTP="true")
    )
    assert settings.api.client.insecure_http is True
    assert api_url_for(settings, "discovery") == "http://127.0.0.1:8081"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x.example.test",
        "https://",
        "api.example.test",
        "https://x.test/?a=1",
        "https://x:99999",
    ],
)
def test_a_url_that_is_not_an_https_base_url_names_api_url(url: str) -> None:
    assert config_error(environ=env(API_URL=url)).startswith("API_URL: ")


def test_credentials_in_a_url_are_refused_without_echoing_them() -> None:
    message = config_error(environ=env(API_URL="https://user:hunter2@x.example.test"))
    assert message.startswith("API_URL: must not contain credentials")
    assert "hunter2" not in message


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.test/v1?apikey=k-8c1d55e0a9b34f27",
        "https://api.example.test/v1#k-8c1d55e0a9b34f27",
        "https://k-8c1d55e0a9b34f27@api.example.test",
        "https://api.example.test/v1?",
        "ftp://api.example.test/k-8c1d55e0a9b34f27",
        "https://api.example.test:port/k-8c1d55e0a9b34f27",
    ],
)
def test_a_url_with_more_than_a_host_and_a_path_prefix_is_refused_without_echoing_it(
    url: str,
) -> None:
    message = config_error(environ=env(API_URL=url))
    assert message.startswith("API_URL: ")
    assert "8c1d55e0" not in message and "api.example.test" not in message


def test_a_path_prefix_is_kept_but_never_shown() -> None:
    url = "https://gateway.example.test/moonin/k-8c1d55e0a9b34f27"
    settings = load_settings("discovery", env(API_URL=url))
    assert api_url_for(settings, "discovery") == url
    assert "8c1d55e0" not in repr(settings)
    assert "'https://gateway.example.test/***'" in repr(settings)


# --- identity and the token ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["PROJECT_ID", "CLUSTER_ID"])
def test_identity_is_required(name: str) -> None:
    assert config_error(environ=env(**{name: None})) == f"{name}: not set"


def test_a_cluster_id_that_would_break_a_url_path_is_refused() -> None:
    assert config_error(environ=env(CLUSTER_ID="a/b")).startswith("CLUSTER_ID: expected")


def test_a_token_is_required() -> None:
    message = config_error(environ=env(CLUSTER_TOKEN=None))
    assert message == "CLUSTER_TOKEN: not set; set CLUSTER_TOKEN or CLUSTER_TOKEN_FILE"


def test_a_token_file_alone_is_enough(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    settings = load_settings(
        "discovery", env(CLUSTER_TOKEN=None, CLUSTER_TOKEN_FILE=str(token_file))
    )
    assert settings.identity.token is None
    assert settings.identity.token_file == str(token_file)


def test_a_missing_token_file_is_named_but_its_path_is_not_echoed(tmp_path: Path) -> None:
    path = str(tmp_path / "nowhere" / "token")
    message = config_error(environ=env(CLUSTER_TOKEN_FILE=path))
    assert message == "CLUSTER_TOKEN_FILE: the file does not exist"


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  \n")
    message = config_error(environ=env(CLUSTER_TOKEN=None, CLUSTER_TOKEN_FILE=str(token_file)))
    assert message == "CLUSTER_TOKEN_FILE: the file is empty"


def test_a_token_file_with_unsendable_content_is_refused_without_showing_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("two words-3f9a1c77")
    message = config_error(environ=env(CLUSTER_TOKEN_FILE=str(token_file)))
    assert message.startswith("CLUSTER_TOKEN_FILE: ")
    assert "words-3f9a1c77" not in message


def test_a_weird_token_is_refused_without_echoing_it() -> None:
    message = config_error(environ=env(CLUSTER_TOKEN="tok en\u00e9-3f9a1c77"))
    assert message.startswith("CLUSTER_TOKEN: ")
    assert "3f9a1c77" not in message
    assert "tok en" not in message


@pytest.mark.parametrize("source", ["environment", "token file"])
def test_a_token_too_short_to_be_told_from_ordinary_text_is_refused(
    tmp_path: Path, source: str
) -> None:
    # A 1-character token would make the log redactor blank that character everywhere.
    if source == "environment":
        message = config_error(environ=env(CLUSTER_TOKEN="e"))
        assert message == (
            "CLUSTER_TOKEN: has length 1; a cluster token has at least 16 characters "
            "(value not shown)"
        )
    else:
        token_file = tmp_path / "token"
        token_file.write_text("tok-3f9a1c7\n")
        message = config_error(environ=env(CLUSTER_TOKEN_FILE=str(token_file)))
        assert message.startswith("CLUSTER_TOKEN_FILE: has length 11; ")
        assert "tok-3f9a1c7" not in message


def test_a_token_pasted_into_another_setting_is_scrubbed_from_the_message() -> None:
    token = "abc/def-0123456789"
    message = config_error(environ=env(CLUSTER_TOKEN=token, PROJECT_ID=token))
    assert message.startswith("PROJECT_ID: ")
    assert token not in message


def test_repr_and_str_of_settings_never_show_the_token() -> None:
    settings = load_settings("discovery", env())
    assert TOKEN not in repr(settings)
    assert TOKEN not in str(settings)
    assert "token='[REDACTED]'" in repr(settings)
    assert settings.identity.token == TOKEN  # still there for the API client


def test_a_blank_variable_counts_as_unset() -> None:
    settings = load_settings("discovery", env(LOG_LEVEL="", API_URL="  ", QUEUE_DIR=""))
    assert settings.process.log_level == "info"
    assert api_url_for(settings, "discovery") == DEFAULT_API_URLS["discovery"]
    assert settings.outbox.queue_dir == OutboxSettings.queue_dir


# --- config.yaml and precedence -----------------------------------------------------------------


def test_an_empty_config_file_means_all_defaults(tmp_path: Path) -> None:
    path = write_config(tmp_path, "# nothing here\n")
    settings = load_settings("discovery", env(), config_file=path)
    assert settings.config_file == path
    assert dataclasses.replace(settings, config_file=None) == load_settings("discovery", env())


def test_the_file_sets_filters_and_knobs(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
log_level: DEBUG
ignore_namespaces: [kube-system, monitoring]
ignore_resources: ["job/*", "deployment/shop/*"]
ignore_node_labels: [kubernetes.io/hostname]
queue_dir: /data/queue
queue_max_records: 5000
queue_max_bytes: 1048576
batch_max_records: 100
batch_max_bytes: 65536
linger_seconds: 0.5
shutdown_ship_seconds: 20
reconcile_interval_seconds: 15
collect_helm_releases: false
collect_job_logs: no
collect_events: off
leader_election: true
api_deadline_seconds: 45
api_max_answer_bytes: 2097152
kube_deadline_seconds: 20
""",
    )
    settings = load_settings("discovery", env(), config_file=path)
    assert (settings.api.client.deadline_seconds, settings.api.client.max_answer_bytes) == (
        45,
        2 << 20,
    )
    assert settings.kube.deadline_seconds == 20
    assert settings.process.log_level == "debug"
    assert settings.filters.ignore_namespaces == ("kube-system", "monitoring")
    assert settings.filters.ignore_resources == ("job/*", "deployment/shop/*")
    assert settings.filters.ignore_node_labels == ("kubernetes.io/hostname",)
    assert settings.outbox.queue_dir == "/data/queue"
    assert (settings.outbox.bounds.max_records, settings.outbox.bounds.max_bytes) == (5000, 1048576)
    assert (
        settings.outbox.shipping.batch_max_records,
        settings.outbox.shipping.batch_max_bytes,
    ) == (100, 65536)
    assert settings.outbox.shipping.linger_seconds == 0.5
    assert settings.outbox.shutdown_ship_seconds == 20
    assert settings.scaling.reconcile_interval_seconds == 15
    assert settings.discovery.collector.collect_helm_releases is False
    assert settings.discovery.collector.collect_job_logs is False
    assert settings.discovery.collector.collect_events is False
    assert settings.discovery.leader_election is True


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "log_level: debug\nignore_resources: [job/*]\nqueue_max_bytes: 2000000\n"
        "leader_election: true\nqueue_dir: /from/file\n",
    )
    settings = load_settings(
        "discovery",
        env(
            LOG_LEVEL="error",
            IGNORE_RESOURCES="cronjob/*, deployment/shop/web-*",
            QUEUE_MAX_BYTES="3000000",
            LEADER_ELECTION="false",
            QUEUE_DIR="/from/env",
        ),
        config_file=path,
    )
    assert settings.process.log_level == "error"
    assert settings.filters.ignore_resources == ("cronjob/*", "deployment/shop/web-*")
    assert settings.outbox.bounds.max_bytes == 3000000
    assert settings.discovery.leader_election is False
    assert settings.outbox.queue_dir == "/from/env"


def test_collect_events_comes_from_the_environment_or_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "collect_events: false\n")
    assert (
        load_settings("discovery", env(), config_file=path).discovery.collector.collect_events
        is False
    )
    on = load_settings("discovery", env(COLLECT_EVENTS="true"), config_file=path)
    assert on.discovery.collector.collect_events is True
    assert (
        load_settings("discovery", env(COLLECT_EVENTS="no")).discovery.collector.collect_events
        is False
    )
    message = config_error(environ=env(COLLECT_EVENTS="sometimes"))
    assert message == "COLLECT_EVENTS: expected true or false, got 9 characters (not shown)"


def test_an_empty_list_in_the_file_replaces_the_default(tmp_path: Path) -> None:
    path = write_config(tmp_path, "ignore_namespaces: []\n")
    assert load_settings("discovery", env(), config_file=path).filters.ignore_namespaces == ()


def test_a_null_value_in_the_file_keeps_the_default(tmp_path: Path) -> None:
    path = write_config(tmp_path, "ignore_namespaces:\nlog_level: null\n")
    settings = load_settings("discovery", env(), config_file=path)
    assert settings.filters.ignore_namespaces == ("kube-system",)
    assert settings.process.log_level == "info"


def test_the_config_argument_wins_over_config_file(tmp_path: Path) -> None:
    chosen = write_config(tmp_path, "log_level: warning\n")
    settings = load_settings(
        "discovery", env(CONFIG_FILE=str(tmp_path / "absent.yaml")), config_file=chosen
    )
    assert settings.process.log_level == "warning"


def test_config_file_from_the_environment_is_read(tmp_path: Path) -> None:
    path = write_config(tmp_path, "log_level: error\n")
    assert load_settings("discovery", env(CONFIG_FILE=path)).process.log_level == "error"


def test_an_unknown_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    path = write_config(tmp_path, "queue_max_byte: 10\n")
    message = config_error(config_file=path)
    assert (
        message == 'config.yaml: unknown setting "queue_max_byte" (did you mean queue_max_bytes?)'
    )


def test_an_environment_only_setting_in_the_file_says_where_it_belongs(tmp_path: Path) -> None:
    path = write_config(tmp_path, f"cluster_token: {TOKEN}\n")
    message = config_error(config_file=path)
    assert message == (
        "config.yaml: cluster_token: not read from config.yaml; "
        "set CLUSTER_TOKEN in the environment"
    )


def test_a_wrong_type_in_the_file_names_the_key_and_the_value(tmp_path: Path) -> None:
    path = write_config(tmp_path, "queue_max_bytes: lots\n")
    message = config_error(config_file=path)
    assert message == (
        "config.yaml: queue_max_bytes: expected an integer from 1048576 to 68719476736, "
        "got 4 characters (not shown)"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("ignore_namespaces: kube-system: x\n", None),
        ("ignore_namespaces: {a: 1}\n", "ignore_namespaces"),
        ("ignore_namespaces: [1]\n", "ignore_namespaces"),
        ("collect_job_logs: maybe\n", "collect_job_logs"),
        ("linger_seconds: [1]\n", "linger_seconds"),
        ("queue_dir: 12\n", "queue_dir"),
        ("log_level: 3\n", "log_level"),
        ("queue_max_records: 1.5\n", "queue_max_records"),
    ],
)
def test_bad_values_in_the_file_are_one_line_errors(
    tmp_path: Path, text: str, key: str | None
) -> None:
    message = config_error(config_file=write_config(tmp_path, text))
    if key is not None:
        assert message.startswith(f"config.yaml: {key}: ")


def test_invalid_yaml_is_reported_with_its_position(tmp_path: Path) -> None:
    path = write_config(tmp_path, "log_level: [info\n")
    message = config_error(config_file=path)
    assert message.startswith(f"--config: {path} is not valid YAML (")
    assert "line " in message


def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path, "- log_level\n")
    assert config_error(config_file=path) == (
        f"--config: {path} must hold a mapping of settings, got a list of 1"
    )


def test_a_duplicate_key_is_refused_instead_of_the_last_one_winning(tmp_path: Path) -> None:
    path = write_config(tmp_path, "log_level: info\nlog_level: debug\n")
    assert "duplicate key 'log_level'" in config_error(config_file=path)


@pytest.mark.parametrize("via_env", [False, True])
def test_an_explicit_config_file_that_does_not_exist_is_an_error(
    tmp_path: Path, via_env: bool
) -> None:
    path = str(tmp_path / "missing.yaml")
    if via_env:
        message = config_error(environ=env(CONFIG_FILE=path))
        assert message == f"CONFIG_FILE: {path} does not exist"
    else:
        assert config_error(config_file=path) == f"--config: {path} does not exist"


def test_a_directory_as_config_file_is_an_error(tmp_path: Path) -> None:
    assert config_error(config_file=str(tmp_path)).startswith("--config: ")


# --- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("Yes", True),
        ("false", False),
        ("0", False),
        ("no", False),
    ],
)
def test_booleans_accept_the_usual_spellings(text: str, expected: bool) -> None:
    settings = load_settings("discovery", env(MOONIN_INSECURE_HTTP=text, LEADER_ELECTION=text))
    assert settings.api.client.insecure_http is expected
    assert settings.discovery.leader_election is expected


def test_a_bad_boolean_names_the_variable() -> None:
    message = config_error(environ=env(MOONIN_INSECURE_HTTP="sure"))
    assert message == "MOONIN_INSECURE_HTTP: expected true or false, got 4 characters (not shown)"


def test_leader_election_auto_leaves_the_decision_to_the_agent() -> None:
    assert load_settings("discovery", env(LEADER_ELECTION="auto")).discovery.leader_election is None


@pytest.mark.parametrize(
    ("text", "level"), [("DEBUG", "debug"), ("Warning", "warning"), ("warn", "warning")]
)
def test_log_level_is_case_insensitive(text: str, level: str) -> None:
    assert load_settings("discovery", env(LOG_LEVEL=text)).process.log_level == level


def test_an_unknown_log_level_is_refused() -> None:
    message = config_error(environ=env(LOG_LEVEL="verbose"))
    assert message == (
        "LOG_LEVEL: expected one of debug, info, warning, error, got 7 characters (not shown)"
    )


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("QUEUE_MAX_BYTES", "0", "must be from 1048576 to 68719476736, got less"),
        ("QUEUE_MAX_BYTES", "1000000000000", "must be from 1048576 to 68719476736, got more"),
        (
            "QUEUE_MAX_RECORDS",
            "many",
            "expected an integer from 1000 to 10000000, got 4 characters (not shown)",
        ),
        ("QUEUE_MAX_RECORDS", "10", "must be from 1000 to 10000000, got less"),
        ("BATCH_MAX_RECORDS", "-5", "must be from 10 to 10000, got less"),
        ("BATCH_MAX_BYTES", "2048", "must be from 65536 to 16777216, got less"),
        ("RECONCILE_INTERVAL_SECONDS", "0.000001", "must be from 0.1 to 3600, got less"),
        ("RECONCILE_INTERVAL_SECONDS", "3601", "must be from 0.1 to 3600, got more"),
        ("HEARTBEAT_SECONDS", "0.001", "must be from 1 to 3600, got less"),
        ("ANTI_ENTROPY_SECONDS", "1", "must be from 600 to 2592000, or 0 (off), got less"),
        (
            "LINGER_SECONDS",
            "nan",
            "expected a number of seconds from 0 to 60, got 3 characters (not shown)",
        ),
        ("SHUTDOWN_SHIP_SECONDS", "-1", "must be from 0 to 3600, got less"),
        ("API_DEADLINE_SECONDS", "0", "must be from 1 to 600, got less"),
        ("API_DEADLINE_SECONDS", "601", "must be from 1 to 600, got more"),
        ("KUBE_DEADLINE_SECONDS", "-2", "must be from 1 to 600, got less"),
        ("API_MAX_ANSWER_BYTES", "1024", "must be from 65536 to 67108864, got less"),
        ("API_MAX_ANSWER_BYTES", "1073741824", "must be from 65536 to 67108864, got more"),
        ("API_CONNECT_TIMEOUT_SECONDS", "0.5", "must be from 1 to 120, got less"),
        ("API_READ_TIMEOUT_SECONDS", "601", "must be from 1 to 600, got more"),
        ("LEASE_DURATION_SECONDS", "1", "must be from 2 to 600, got less"),
        ("LEASE_RENEW_DEADLINE_SECONDS", "601", "must be from 1 to 600, got more"),
        ("LEASE_RETRY_SECONDS", "0.1", "must be from 0.2 to 60, got less"),
        ("WATCH_TIMEOUT_SECONDS", "30", "must be from 60 to 3600, got less"),
        (
            "WATCH_TIMEOUT_SECONDS",
            "90.5",
            "expected an integer from 60 to 3600, got 4 characters (not shown)",
        ),
        ("WATCH_READ_TIMEOUT_SECONDS", "3601", "must be from 30 to 3600, got more"),
        ("LIST_PAGE_SIZE", "10", "must be from 50 to 5000, got less"),
        ("LIST_PAGE_SIZE", "100000", "must be from 50 to 5000, got more"),
    ],
)
def test_numbers_out_of_range_name_the_variable_and_its_bounds(
    name: str, value: str, problem: str
) -> None:
    assert config_error(environ=env(**{name: value})) == f"{name}: {problem}"


def test_the_gitops_setting_takes_yield_or_reassert_and_names_them_when_refused() -> None:
    settings = load_settings("scaling", env(GITOPS_CONFLICTS=" Reassert ", REASSERT_SECONDS="60"))
    assert (settings.scaling.gitops_conflicts, settings.scaling.reassert_seconds) == (
        "reassert",
        60,
    )
    assert load_settings("scaling", env()).scaling.gitops_conflicts == "yield"
    assert config_error(environ=env(GITOPS_CONFLICTS="fight")) == (
        "GITOPS_CONFLICTS: expected one of yield, reassert, got 5 characters (not shown)"
    )
    assert config_error(environ=env(REASSERT_SECONDS="0")) == (
        "REASSERT_SECONDS: must be from 1 to 86400, got less"
    )


def test_numbers_from_the_environment_are_parsed() -> None:
    settings = load_settings(
        "scaling",
        env(
            QUEUE_MAX_RECORDS="1000",
            QUEUE_MAX_BYTES="1048576",
            BATCH_MAX_RECORDS="10",
            BATCH_MAX_BYTES="65536",
            LINGER_SECONDS="0",
            SHUTDOWN_SHIP_SECONDS="2.5",
            RECONCILE_INTERVAL_SECONDS="0.5",
            API_DEADLINE_SECONDS="12.5",
            API_MAX_ANSWER_BYTES="1048576",
            KUBE_DEADLINE_SECONDS="90",
        ),
    )
    assert (settings.api.client.deadline_seconds, settings.api.client.max_answer_bytes) == (
        12.5,
        1 << 20,
    )
    assert settings.kube.deadline_seconds == 90
    assert (settings.outbox.bounds.max_records, settings.outbox.bounds.max_bytes) == (1000, 1 << 20)
    assert (
        settings.outbox.shipping.batch_max_records,
        settings.outbox.shipping.batch_max_bytes,
    ) == (10, 65536)
    assert settings.outbox.shipping.linger_seconds == 0
    assert settings.outbox.shutdown_ship_seconds == 2.5
    assert settings.scaling.reconcile_interval_seconds == 0.5


def test_the_timeouts_and_the_lease_timing_from_the_environment_fill_their_branches() -> None:
    settings = load_settings(
        "discovery",
        env(
            API_CONNECT_TIMEOUT_SECONDS="3",
            API_READ_TIMEOUT_SECONDS="7.5",
            LEASE_DURATION_SECONDS="40",
            LEASE_RENEW_DEADLINE_SECONDS="30",
            LEASE_RETRY_SECONDS="5",
            WATCH_TIMEOUT_SECONDS="120",
            WATCH_READ_TIMEOUT_SECONDS="90",
            LIST_PAGE_SIZE="250",
        ),
    )
    client = settings.api.client
    assert (client.connect_timeout_seconds, client.read_timeout_seconds) == (3, 7.5)
    lease = settings.discovery.lease
    assert (lease.lease_seconds, lease.renew_deadline_seconds, lease.retry_seconds) == (40, 30, 5)
    informer = settings.discovery.collector.informer
    assert informer.watch_timeout_seconds == (120, 240)
    assert (informer.read_timeout_seconds, informer.page_size) == (90, 250)


def test_the_same_timeouts_are_read_from_the_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "lease_duration_seconds: 20\nwatch_timeout_seconds: 600\nlist_page_size: 1000\n"
        "api_read_timeout_seconds: 12\n",
    )
    settings = load_settings("discovery", env(), config_file=path)
    assert settings.discovery.lease.lease_seconds == 20
    assert settings.discovery.collector.informer.watch_timeout_seconds == (600, 1200)
    assert settings.discovery.collector.informer.page_size == 1000
    assert settings.api.client.read_timeout_seconds == 12


@pytest.mark.parametrize(
    ("timing", "problem"),
    [
        (
            {"LEASE_DURATION_SECONDS": "10"},
            "LEASE_RENEW_DEADLINE_SECONDS: must be less than LEASE_DURATION_SECONDS",
        ),
        (
            {"LEASE_RENEW_DEADLINE_SECONDS": "2"},
            "LEASE_RETRY_SECONDS: must be less than LEASE_RENEW_DEADLINE_SECONDS",
        ),
    ],
)
def test_a_lease_timing_out_of_order_is_refused_without_its_values(
    timing: dict[str, str], problem: str
) -> None:
    # A leader that gives up only when others may already lead, or never retries before it
    # gives up, would let two replicas collect at once.
    assert config_error(environ=env(**timing)) == problem


def test_the_collectors_settings_hold_the_filters_branch_as_it_is(tmp_path: Path) -> None:
    path = write_config(tmp_path, "ignore_namespaces: [scratch]\n")
    settings = load_settings("discovery", env(IGNORE_RESOURCES="job/*"), config_file=path)
    assert settings.discovery.collector.filters is settings.filters
    assert settings.filters.ignore_resources == ("job/*",)
    assert settings.filters.ignore_namespaces == ("scratch",)


@pytest.mark.parametrize("addr", ["0.0.0.0:8080", ":9090", "[::]:8080", "localhost:0"])
def test_health_addr_accepts_host_port(addr: str) -> None:
    assert load_settings("discovery", env(HEALTH_ADDR=addr)).process.health_addr == addr


@pytest.mark.parametrize("addr", ["8080", "0.0.0.0:70000", "0.0.0.0:http", ":::8080"])
def test_health_addr_refuses_anything_else(addr: str) -> None:
    assert config_error(environ=env(HEALTH_ADDR=addr)).startswith("HEALTH_ADDR: ")


def test_split_host_port_unwraps_ipv6_brackets() -> None:
    assert split_host_port("[::1]:8081") == ("::1", 8081)
    assert split_host_port(":8080") == ("", 8080)


def test_pod_identity_comes_from_the_downward_api_variables() -> None:
    settings = load_settings("discovery", env(POD_NAME="agent-0", POD_NAMESPACE="moonin"))
    assert (settings.identity.pod_name, settings.identity.pod_namespace) == ("agent-0", "moonin")


@pytest.mark.parametrize(
    "entry", ["job", "Job/*", "job//x", "deployment/shop/web/x", "/x", "job-2/*", "job/a b"]
)
def test_a_malformed_ignore_resources_entry_is_named(entry: str) -> None:
    message = config_error(environ=env(IGNORE_RESOURCES=f"cronjob/*,{entry}"))
    assert message.startswith("IGNORE_RESOURCES: entry ")


def test_ignore_resources_accepts_any_kind_and_namespaced_globs() -> None:
    settings = load_settings("discovery", env(IGNORE_RESOURCES="*/kube-*,network_policy/*"))
    assert settings.filters.ignore_resources == ("*/kube-*", "network_policy/*")


def test_a_ca_bundle_that_does_not_exist_is_named(tmp_path: Path) -> None:
    path = str(tmp_path / "ca.pem")
    assert config_error(environ=env(MOONIN_CA_BUNDLE=path)) == (
        "MOONIN_CA_BUNDLE: the file does not exist"
    )


def test_a_ca_bundle_without_a_certificate_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    path.write_text("not a certificate\n")
    message = config_error(environ=env(MOONIN_CA_BUNDLE=str(path)))
    assert message.startswith("MOONIN_CA_BUNDLE: holds no usable PEM certificate")


def test_a_valid_ca_bundle_is_kept_and_the_file_key_works(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    assert load_settings("discovery", env(MOONIN_CA_BUNDLE=str(path))).api.client.ca_bundle == str(
        path
    )
    config = write_config(tmp_path, f"ca_bundle: {path}\n")
    assert load_settings("discovery", env(), config_file=config).api.client.ca_bundle == str(path)


def test_discovery_knobs_for_the_heartbeat_and_cloud_metadata() -> None:
    defaults = load_settings("discovery", env())
    assert (defaults.discovery.heartbeat_seconds, defaults.discovery.cloud_metadata) == (60.0, None)
    tuned = load_settings("discovery", env(HEARTBEAT_SECONDS="5", CLOUD_METADATA="false"))
    assert (tuned.discovery.heartbeat_seconds, tuned.discovery.cloud_metadata) == (5.0, False)
    assert config_error(environ=env(HEARTBEAT_SECONDS="0")).startswith("HEARTBEAT_SECONDS:")
    assert config_error(environ=env(CLOUD_METADATA="maybe")).startswith("CLOUD_METADATA:")


# A value pasted into the wrong setting: a key with characters no setting accepts, and one
# of digits only (a number far out of every range).
PASTED = ("ghp_8c1d55e0a9b34f27 /?#%", "80512345678901234567")


@pytest.mark.parametrize("pasted", PASTED, ids=["text", "digits"])
@pytest.mark.parametrize("name", sorted(ENVIRONMENT - {"CONFIG_FILE"}))
def test_no_environment_variable_is_repeated_in_its_error(name: str, pasted: str) -> None:
    try:
        load_settings("discovery", env(**{name: pasted}))
    except ConfigError as error:
        assert pasted not in str(error) and pasted.split()[0] not in str(error)


@pytest.mark.parametrize("pasted", PASTED, ids=["text", "digits"])
@pytest.mark.parametrize("key", sorted(FILE_KEYS))
def test_no_config_file_value_is_repeated_in_its_error(
    tmp_path: Path, key: str, pasted: str
) -> None:
    path = write_config(tmp_path, f"{key}: '{pasted}'\n")
    try:
        load_settings("discovery", env(), config_file=path)
    except ConfigError as error:
        assert str(error).startswith(f"config.yaml: {key}: ")
        assert pasted not in str(error) and pasted.split()[0] not in str(error)


def test_a_variable_a_typo_away_from_a_setting_is_named_with_the_setting_it_meant() -> None:
    environ = {
        "QUEUE_MAX_RECORD": "5000",
        "CLSUTER_ID": "c-1",
        "HEARTBEAT_SECOND": "30",
        "QUEUE_MAX_RECORDS": "5000",
        # Not ours: the downward API's usual names, the pod's Service links, the proxies.
        "NODE_NAME": "node-1",
        "POD_IP": "10.0.0.7",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "MOONIN_AGENT_PORT_8080_TCP_ADDR": "10.96.0.9",
        "HTTPS_PROXY": "http://proxy:3128",
    }
    assert misspelt_variables(environ) == [
        ("CLSUTER_ID", "CLUSTER_ID"),
        ("HEARTBEAT_SECOND", "HEARTBEAT_SECONDS"),
        ("QUEUE_MAX_RECORD", "QUEUE_MAX_RECORDS"),
    ]


@given(
    st.text(alphabet="ABCDE_", max_size=14),
    st.text(alphabet="ABCDE_", max_size=14),
    st.integers(min_value=0, max_value=3),
)
def test_counting_edits_up_to_a_limit_agrees_with_counting_them_all(
    a: str, b: str, limit: int
) -> None:
    """The count stops early once past its limit; under the limit it is the full count, and
    above it it says so, whatever the strings."""
    unbounded = _edits(a, b, len(a) + len(b))  # never past this: no early stop
    assert _edits(a, b, limit) == min(unbounded, limit + 1)


# --- the README ----------------------------------------------------------------------------------


def readme_rows() -> list[list[str]]:
    """The cells of the README's configuration table, one list per row."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    table = text.split("| environment | config.yaml | default | range | meaning |", 1)[1]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows


def shown_default(value: object) -> str | None:
    """How the README writes a default; None: in words of its own (decided at start-up)."""
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return None
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, tuple):
        return f"`[{', '.join(value)}]`" if value else "none"
    return str(value)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: setting.field)
def test_the_readme_lists_every_setting_with_its_default(setting: Setting) -> None:
    rows = [
        row
        for row in readme_rows()
        if (setting.env is None or f"`{setting.env}`" in row[0])
        and (setting.key is None or f"`{setting.key}`" in row[1])
        and (setting.env is not None or row[0] == "")
    ]
    assert len(rows) == 1, f"README: no single row for {setting.env or setting.key}"
    show = getattr(setting.parse, "show", None)  # a number, as its bounds are written
    default = show(setting.default) if show else shown_default(setting.default)
    if default is not None:
        assert rows[0][2] == default
    assert rows[0][3] == getattr(setting.parse, "shown_range", "")


# Names the chart, its users' values and their config.yaml files already carry.
PUBLISHED_VARIABLES = [
    "ANTI_ENTROPY_SECONDS",
    "API_DEADLINE_SECONDS",
    "API_MAX_ANSWER_BYTES",
    "API_URL",
    "BATCH_MAX_BYTES",
    "BATCH_MAX_RECORDS",
    "CLOUD_METADATA",
    "CLUSTER_ID",
    "CLUSTER_TOKEN",
    "CLUSTER_TOKEN_FILE",
    "COLLECT_EVENTS",
    "CONFIG_FILE",
    "DISCOVERY_API_URL",
    "HEALTH_ADDR",
    "HEARTBEAT_SECONDS",
    "IGNORE_RESOURCES",
    "KUBE_DEADLINE_SECONDS",
    "LEADER_ELECTION",
    "LINGER_SECONDS",
    "LOG_LEVEL",
    "MOONIN_CA_BUNDLE",
    "MOONIN_INSECURE_HTTP",
    "POD_NAME",
    "POD_NAMESPACE",
    "PROJECT_ID",
    "QUEUE_DIR",
    "QUEUE_MAX_BYTES",
    "QUEUE_MAX_RECORDS",
    "RECONCILE_INTERVAL_SECONDS",
    "SCALING_API_URL",
    "SHUTDOWN_SHIP_SECONDS",
]
PUBLISHED_KEYS = [
    "anti_entropy_seconds",
    "api_deadline_seconds",
    "api_max_answer_bytes",
    "batch_max_bytes",
    "batch_max_records",
    "ca_bundle",
    "cloud_metadata",
    "collect_events",
    "collect_helm_releases",
    "collect_job_logs",
    "heartbeat_seconds",
    "ignore_namespaces",
    "ignore_node_labels",
    "ignore_resources",
    "kube_deadline_seconds",
    "leader_election",
    "linger_seconds",
    "log_level",
    "queue_dir",
    "queue_max_bytes",
    "queue_max_records",
    "reconcile_interval_seconds",
    "shutdown_ship_seconds",
]


def test_every_published_variable_and_file_key_is_still_read() -> None:
    assert set(PUBLISHED_VARIABLES) <= ENVIRONMENT
    assert set(PUBLISHED_KEYS) <= FILE_KEYS
