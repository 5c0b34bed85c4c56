"""The free-text redactor: every credential shape masked, the fixed wording of Kubernetes kept."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from collector import event_messages, redact, sanitize
from collector.normalize import job_execution
from collector.sanitize import Condition

SECRET = "hunter2-Xy9-c0ffee"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
AWS = "AKIA" + "Q3EGJX7SEXAMPLE4"
SLACK = "xoxb-2761-1133-" + "kRtv9DvQsy3pbSeCrEt"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlLXNlY3JldA"


@pytest.mark.parametrize(
    ("given", "shipped"),
    [
        # credentials in URLs, a password holding an `@` included
        (f"postgres://admin:{SECRET}@db:5432/shop", "postgres://[REDACTED]@db:5432/shop"),
        (f"https://svc:p@ss{SECRET}@auth.example.com/v1", "https://[REDACTED]@auth.example.com/v1"),
        (
            f"webhook http://external-dns:{SECRET}@webhook.dns.svc:8888/records failed",
            "webhook http://[REDACTED]@webhook.dns.svc:8888/records failed",
        ),
        (f"clone https://{GITHUB}@github.com/o/r", "clone https://[REDACTED]@github.com/o/r"),
        # headers, in nginx's syntax, as a log prints them, and the bare schemes
        (
            f'proxy_set_header Authorization "Basic {SECRET}";',
            'proxy_set_header Authorization "Basic [REDACTED]";',
        ),
        (f"Authorization: Bearer {SECRET}", "Authorization: Bearer [REDACTED]"),
        (f"> Proxy-Authorization: {SECRET}", "> Proxy-Authorization: [REDACTED]"),
        (f'-H "authorization: token {SECRET}" x', '-H "authorization: token [REDACTED]" x'),
        (f"sent Bearer {SECRET} to api", "sent Bearer [REDACTED] to api"),
        ("sent Basic dXNlcjpwYXNzd29yZA==", "sent Basic [REDACTED]"),
        # values after keys that name a credential, in every syntax
        (f"password={SECRET} user=bob", "password=[REDACTED] user=bob"),
        (f"DB_PASSWD={SECRET}", "DB_PASSWD=[REDACTED]"),
        (f"pwd={SECRET}&host=db", "pwd=[REDACTED]&host=db"),
        (f"client_secret={SECRET}", "client_secret=[REDACTED]"),
        (f"?access_token={SECRET}&x=1", "?access_token=[REDACTED]&x=1"),
        (f"apikey={SECRET}", "apikey=[REDACTED]"),
        (f"api_key: '{SECRET}'", "api_key: '[REDACTED]'"),
        (f"auth={SECRET}", "auth=[REDACTED]"),
        (f"credentials={SECRET}", "credentials=[REDACTED]"),
        (f"private_key={SECRET}", "private_key=[REDACTED]"),
        (f'{{"password": "{SECRET}", "user": "app"}}', '{"password": "[REDACTED]", "user": "app"}'),
        (f"token:{SECRET}", "token:[REDACTED]"),
        (f"--db-password={SECRET} --port=5432", "--db-password=[REDACTED] --port=5432"),
        (f"--password {SECRET} --verbose", "--password [REDACTED] --verbose"),
        (
            f'exec: "/bin/api --db-password={SECRET}": denied',
            'exec: "/bin/api --db-password=[REDACTED]": denied',
        ),
        (f"a=token={SECRET} b", "a=token=[REDACTED] b"),
        (f"password=[{SECRET}]", "password=[REDACTED]]"),
        (f"auth admin {SECRET} failed", "auth [REDACTED] failed"),
        (f"auth {SECRET} failed", "auth [REDACTED] failed"),
        (f"mysql --command -p{SECRET} -h db", "mysql --command -p[REDACTED] -h db"),
        (f"redis: auth admin {SECRET}: denied", "redis: auth [REDACTED]: denied"),
        (f"login with password {SECRET}", "login with password [REDACTED]"),
        # token formats, wherever they stand
        (f"deploy {GITHUB} done", "deploy [REDACTED] done"),
        (f"pat {GITHUB_PAT}", "pat [REDACTED]"),
        (f"key {AWS} used", "key [REDACTED] used"),
        (f"notify {SLACK}", "notify [REDACTED]"),
        (f"session {JWT}", "session [REDACTED]"),
        # PEM blocks: whole, cut at the end, cut at the start (a log's tail)
        (
            f"key: -----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY----- ok",
            "key: -----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY----- ok",
        ),
        (
            f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}",
            "-----BEGIN PRIVATE KEY-----[REDACTED]",
        ),
        (f"{PEM_BODY}\n-----END PRIVATE KEY-----\nnext", "[REDACTED]\nnext"),
        # an admission denial's reason, the webhook's own text
        (
            'admission webhook "deny.example.com" denied the request: value'
            f" {SECRET} is not allowed",
            'admission webhook "deny.example.com" denied the request: [REDACTED]',
        ),
        (
            "ValidatingAdmissionPolicy 'no-plain' with binding 'b' denied request:"
            f" env {SECRET} is plain text",
            "ValidatingAdmissionPolicy 'no-plain' with binding 'b' denied request: [REDACTED]",
        ),
    ],
)
def test_every_credential_shape_is_masked_and_the_rest_kept(given: str, shipped: str) -> None:
    assert redact.text(given) == shipped
    assert redact.text(shipped) == shipped  # a redacted text redacts to itself


@pytest.mark.parametrize(
    "fixed",
    [
        "Back-off restarting failed container app in pod web-7c9d-x2x4q_shop(0b1c)",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
        'Liveness probe failed: Get "http://10.0.0.1:8080/healthz": dial tcp 10.0.0.1:8080:'
        " connect: connection refused",
        'pods "web-1" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=0,'
        " limited: pods=0",
        'Failed to pull image "registry.example.com:5000/shop/web:1.4.2@sha256:'
        + "a" * 64
        + '": failed to authorize: failed to fetch anonymous token: unexpected status from GET'
        " request to https://auth.docker.io/token?scope=repository%3Ashop%2Fweb%3Apull"
        "&service=registry.docker.io: 401 Unauthorized",
        'MountVolume.SetUp failed for volume "creds" : secret "db-creds" not found',
        "0/3 nodes are available: 1 node(s) had untolerated taint"
        " {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu.",
        'Container "app" is waiting: CreateContainerConfigError: secret "api-token" not found',
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.",
        "author=jane tokenizer=bpe authors: 3",
        "auth failed for user bob",
        "authorization failed",
        "password authentication failed for user app",
        "Basic authentication required",
        "error: Unauthorized",
        'ReplicaSet "web-7c9d" has successfully progressed.',
    ],
)
def test_the_fixed_wording_of_kubelets_and_controllers_stays_readable(fixed: str) -> None:
    assert redact.text(fixed) == fixed


@pytest.mark.parametrize(
    ("key", "names"),
    [
        *[
            (key, True)
            for key in (
                "password",
                "DB_PASSWORD",
                "dbPassword",
                "dbpassword",
                "passwd",
                "pwd",
                "client-secret",
                "api-token",
                "authToken",
                "apikey",
                "api_key",
                "x-api-key",
                "auth",
                "credentials",
                "private-key",
                "privateKey",
            )
        ],
        *[
            (key, False)
            for key in ("author", "authors", "tokenizer", "tokenize", "keys", "passage", "user")
        ],
    ],
)
def test_a_key_names_a_credential_by_its_words(key: str, names: bool) -> None:
    assert redact.names_credential(key) is names


def test_redaction_comes_before_the_cut_so_no_credential_is_cut_in_half() -> None:
    # Cut first, the URL would lose its `@` and its password would be shipped as a word.
    value = "x" * 2030 + f" https://admin:{SECRET}@db.example.com/"
    shipped = redact.text(value)
    assert SECRET[:6] not in shipped
    assert shipped.startswith("x" * 2030 + " https://[REDACTED")
    assert shipped.endswith("…[truncated 17 bytes]")


def test_a_job_log_is_redacted_as_a_whole_then_split_and_cut() -> None:
    log = (
        f"{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n"  # the tail starts inside a PEM block
        f"GET /api Authorization: Bearer {SECRET}\n"
        f"connecting with password={SECRET}\n"
        "-----BEGIN CERTIFICATE-----\n"
        f"{PEM_BODY}\n{PEM_BODY}\n"
        "-----END CERTIFICATE-----\n"
        "ERROR: upload failed: connection reset by peer\n" + "y" * 3000 + "\n"
    ).encode()
    lines = job_execution.log_lines(log, 200)
    assert lines == [
        "[REDACTED]",
        "GET /api Authorization: Bearer [REDACTED]",
        "connecting with password=[REDACTED]",
        "-----BEGIN CERTIFICATE-----[REDACTED]-----END CERTIFICATE-----",
        "ERROR: upload failed: connection reset by peer",
        "y" * 2048 + "…[truncated 952 bytes]",
    ]
    assert job_execution.log_lines(log, 2) == lines[-2:]


def test_event_messages_and_conditions_go_through_the_redactor() -> None:
    sandbox = (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup"
        f" network for sandbox: plugin returned: auth admin {SECRET}"
    )
    assert event_messages.redact(sandbox) == (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup"
        " network for sandbox: plugin returned: auth [REDACTED]"
    )
    # A word the change-cause filter would keep as plain goes, with the rest of its value,
    # when the redactor finds a credential in it.
    assert event_messages.redact(f"Error: pushing with {AWS} and {JWT}") == (
        "Error: pushing with [REDACTED]"
    )
    [condition] = sanitize.conditions(
        [
            Condition(
                type="ReplicaFailure",
                status="True",
                reason="FailedCreate",
                message='admission webhook "deny.example.com" denied the request: env value'
                f" {SECRET} is not allowed",
            )
        ]
    )
    assert condition["message"] == (
        'admission webhook "deny.example.com" denied the request: [REDACTED]'
    )


def test_a_value_deep_in_a_chain_of_assignments_is_masked() -> None:
    # 50,000 keys each holding the rest as its value: each is looked into once, not nested.
    chain = "a=" * 50_000 + f"password={SECRET}"
    assert redact.redact(chain) == "a=" * 50_000 + "password=[REDACTED]"


def test_a_long_text_is_redacted_as_far_as_what_is_kept_can_reach() -> None:
    tail = "x" * 1_000_000
    shipped = redact.text(f"password={SECRET} {tail}")
    assert shipped.startswith("password=[REDACTED] xxx")
    assert shipped.endswith(f"…[truncated {len('password=[REDACTED] ') + len(tail) - 2048} bytes]")
    # A block that redaction shrinks to a line brings text from past the scanned part into
    # what is kept: then the whole text is redacted, and none of the block is shipped.
    body = "C0ffeeKeyBody" * 30_000
    block = f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----"
    shipped = redact.text(f"key {block} loaded by {GITHUB}")
    assert shipped == (
        "key -----BEGIN PRIVATE KEY-----[REDACTED]-----END PRIVATE KEY----- loaded by [REDACTED]"
    )


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(categories=["Nd", "P", "S", "Zs", "Cc"]), max_size=80))
def test_a_text_without_a_letter_has_no_shape_to_mask(value: str) -> None:
    # What lets `redact` return such a text at once: every shape, run in full, agrees.
    assert not any(c.isascii() and c.isalpha() for c in value)
    assert redact._masked_shapes(value) == value
    assert redact.redact(value) is value


# Near misses of every hint `redact` looks for, and the characters a case-insensitive
# match or a lowering treats specially (the Kelvin sign, the long s, dotted and dotless i).
_NEAR_MISSES = st.sampled_from(
    [
        *("=", ":", '"', "'", "-", "--", " ", "@", "/", ":/", "----", ".", "_", "\n", "p", "-P"),
        *("\u212a", "\u017f", "\u0130", "\u0131", "Bas", "Bear", "tok", "secre", "credent"),
        *("pas", "pw", "ds", "ke", "aut", "gh", "hp_", "AKI", "ASI", "xo", "ey", "J", "denie"),
        *("request", "BEGIN", "END", "Authorizatio", "value", "x9Z", "0123456789ABCDEF"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_NEAR_MISSES, st.text(max_size=6)), max_size=24).map("".join))
def test_a_text_with_no_hint_of_a_shape_has_none_to_mask(value: str) -> None:
    # What lets `redact` return such a text at once: every shape, run in full, agrees.
    assume(not redact._may_hold_a_shape(value))
    assert redact._masked_shapes(value) == value
    assert redact.redact(value) is value


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(_NEAR_MISSES, st.sampled_from(redact._HINTS), st.text(max_size=6)), max_size=24
    ).map("".join)
)
def test_a_text_is_looked_at_in_full_when_it_holds_any_hint_in_any_case(value: str) -> None:
    for text in (value, value.upper(), value.title()):
        lowered = text.lower()
        assert redact._may_hold_a_shape(text) == any(hint in lowered for hint in redact._HINTS)
