"""The one redactor for free text: what of a message, a log line or an annotation may leave.

Free text comes from anywhere (an application's log, an admission webhook, a CNI plugin, a
user's annotation) and nothing vets it, so every free-text field the agent ships or keeps
in its state file ends here, after whatever format-specific filtering its field has
(`collector.event_messages`, `collector.sanitize.change_cause`). `text` masks, in order:

- PEM blocks (`-----BEGIN ...-----` to the matching END, or to the end of the text; a
  text starting inside a block, as a log's tail can, loses everything up to its END);
- a URL's userinfo (`postgres://admin:pw@db` -> `postgres://[REDACTED]@db`);
- the value of an `Authorization` or `Proxy-Authorization` header, and any value after
  `Basic` or `Bearer` that looks like a credential (mixed case, digits or symbols);
- well-known token formats: GitHub (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`,
  `github_pat_`), AWS access key ids (`AKIA`, `ASIA`), Slack (`xox?-`), JWTs;
- the value after a key that names a credential (`names_credential`): `key=value`,
  `key:value`, `"key": "value"`, `--key value`, and mysql's `-pVALUE`; a bare `auth` or
  `password` word followed by words that are not ordinary English loses those words;
- the reason of an admission denial (`admission webhook "x" denied the request: ...`, a
  ValidatingAdmissionPolicy's `denied request: ...`): a webhook's or a policy's own text,
  which quotes the request's fields as it likes.

The key stays, the value goes (`password=[REDACTED]`), so a message still says what was
there. Ordinary words (`author`, `tokenizer`) are not keys of this kind, and the fixed
wording of kubelets and controllers (`Back-off restarting failed container`, probe
failures, quota amounts, image names, URLs without userinfo) has none of these shapes, so
it stays readable. After redaction the text is cut to `MAX_TEXT_BYTES` (`truncate`):
cutting first could split a credential from the shape that gives it away.

Pure and total: any text gives a result, the same text the same result, and a redacted
text redacts to itself.
"""

from __future__ import annotations

import functools
import itertools
import re

REDACTED = "[REDACTED]"
MAX_TEXT_BYTES = 2048
# How much of a long text is redacted, in multiples of what is kept: redaction costs about
# 0.5 s per MB, and an object may carry 256 KB of annotations.
_SCANNED = 16

# Words that name a credential when a key is split into its words (`DB_PASSWORD`,
# `dbPassword`, `x-api-key` -> db/password, api/key). Matched as whole words, so `author`
# and `tokenizer` are not keys of this kind; `dbpassword` is, by the substrings below.
_CREDENTIAL_WORDS = frozenset(
    {
        *("password", "passwords", "passwd", "pwd", "pass", "passphrase", "secret", "secrets"),
        *("token", "tokens", "apikey", "auth", "authorization", "credential", "credentials"),
        *("privatekey", "dsn"),
    }
)
# Two words that name one (`api_key`, `private-key`, `access_token` is covered by `token`).
_CREDENTIAL_PAIRS = frozenset({("api", "key"), ("private", "key"), ("secret", "key")})
# Inside a longer word (`dbpassword`, `clientsecret`, `authtoken`): specific enough.
_CREDENTIAL_PARTS = ("password", "passwd", "secret", "credential", "apikey", "token")
_NOT_CREDENTIAL_PARTS = ("tokeniz",)  # tokenizer, tokenize, tokenization
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# -- the shapes of a credential ------------------------------------------------------------

_LETTER = re.compile(r"[A-Za-z]")

_PEM_BEGIN = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]{1,64})-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{1,64}-----")
# Userinfo: everything between `://` and the host's last `@` (a password may hold an `@`).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,31}://)[^\s/?#\"'<>\\]+@")
_SCHEMES = r"(?:Basic|Bearer|Digest|Token|Negotiate|NTLM|AWS4-HMAC-SHA256)"
# The header's value runs to the end of the line or of the quoted string holding it.
_AUTHORIZATION = re.compile(
    r"(?P<name>\b(?:Proxy-)?Authorization)(?P<sep>\"?\s*[:=]\s*[\"']?|\s+[\"'](?=\s*"
    + _SCHEMES
    + r"\b)|\s+(?="
    + _SCHEMES
    + r"\s))(?P<scheme>"
    + _SCHEMES
    + r"\s+)?(?P<value>[^\"'\r\n]+)",
    re.IGNORECASE,
)
_BARE_SCHEME = re.compile(r"\b(?P<scheme>Basic|Bearer)\s+(?P<value>[A-Za-z0-9+/._~=-]{8,})")
_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{6,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"
)
# A value: a quoted string, the marker, or a run up to a separator (which it may start with:
# `password=[x]`).
_VALUE = re.compile(
    r"\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|\[REDACTED\]|[^\s,;&\"'][^\s,;&\"'<>(){}\[\]]*"
)
# `key=value`, `key:value`, `"key": "value"`, `key: "value"`: the separator is `=`, a colon
# touching its value, or a colon before a quoted value (a colon then a space then a bare
# word is how Go chains errors: `failed to fetch oauth token: unexpected status`). A key
# starts where no key character precedes it (a flag's dashes may): else every position
# inside a long word would start a key scanning to the word's end.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.])(?<![A-Za-z0-9_.]-)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)"
    r"(?P<sep>[\"']?\s*=\s*|:(?=[^\s/:])|[\"']?\s*:\s*(?=[\"']))"
)
# `--db-password hunter2`: a flag naming a credential, then its value as the next word.
_FLAG = re.compile(r"(?<![\w-])(?P<key>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>\s+)(?=[^\s-])")
_FLAG_VALUE = re.compile(r"\S+")
_SHORT_PASSWORD = re.compile(r"(?<![\w-])-p(?P<value>[^\s=\-][^\s]*)")
# `auth admin s3cret`, `password hunter2`: up to two words after the bare keyword.
_BARE = re.compile(
    r"\b(?P<key>auth|AUTH|Auth|password|Password|PASSWORD|passwd|pwd)(?P<sep>[ \t]+)"
    r"(?P<first>[^\s:,;\"'()]+)(?:(?P<gap>[ \t]+)(?P<second>[^\s:,;\"'()]+))?"
)
_DENIAL = re.compile(r"(?P<head>\bdenied (?:the )?request:)[ \t]*(?!\[REDACTED\]$)\S.*", re.S)
# What may follow a bare keyword in a sentence: those are words, not its value.
_ORDINARY = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "been", "by", "can", "cannot", "could"),
        *("denied", "did", "does", "error", "expired", "failed", "failure", "field", "file"),
        *("for", "from", "has", "have", "in", "incorrect", "invalid", "is", "it", "missing"),
        *("must", "not", "of", "on", "or", "provided", "required", "reset", "should", "that"),
        *("the", "to", "too", "was", "were", "will", "with", "without", "authentication"),
        *("changed", "updated", "set", "policy", "mismatch", "rejected", "ok", "succeeded"),
        *("method", "plugin", "type", "header", "mode", "config", "configuration", "enabled"),
        *("disabled", "check", "needed", "request", "requests", "change", "expires", "login"),
    }
)


def names_credential(key: str) -> bool:
    """Whether a key (an annotation's, a flag's, an assignment's) names a credential."""
    lowered = key.lower()
    if any(part in lowered for part in _NOT_CREDENTIAL_PARTS):
        return False
    words = [word.lower() for word in _KEY_WORDS.findall(key)]
    if any(word in _CREDENTIAL_WORDS for word in words):
        return True
    if any(pair in _CREDENTIAL_PAIRS for pair in itertools.pairwise(words)):
        return True
    return any(part in lowered for part in _CREDENTIAL_PARTS)


def text(value: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The text with every credential shape masked, cut to `limit` bytes.

    Of a text longer than `_SCANNED` times `limit`, only that much is redacted: the cut
    may split a credential from the shape that gives it away, but what it splits sits at
    the end of the redacted part, past what is kept. Unless redaction shrank that part to
    near the limit (PEM blocks, tokens): then the whole text is redacted.
    """
    scanned = _SCANNED * limit
    if len(value) > scanned:
        head = redact(value[:scanned])
        if len(head) > 4 * limit:
            return truncate(head + value[scanned:], limit)  # the rest only counts as cut
    return truncate(redact(value), limit)


def redact(value: str) -> str:
    """The text with every credential shape masked (see the module docstring), uncut."""
    if _LETTER.search(value) is None:
        return value  # every shape has a letter, and most annotation values are numbers
    if not _may_hold_a_shape(value):
        return value
    if len(value) <= _REMEMBERED_LENGTH:
        return _remembered(value)
    return _masked_shapes(value)


# Each shape holds one of these, in any case: a key that names a credential holds one of
# its words (`names_credential`: pass, pwd, secret, token, key, auth, credential, dsn), the
# others their fixed text (a PEM line's dashes, `://`, `Basic`, `Bearer`, a token's prefix,
# `denied`, mysql's `-p`). Looking for them costs a few percent of running every shape; one
# pattern looks for all of them in one pass, where a test per hint took one pass each.
_HINTS = (
    *("pass", "pwd", "secret", "token", "key", "auth", "credential", "dsn"),
    *("-----", "://", "basic", "bearer", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    *("akia", "asia", "xox", "eyj", "denied", "-p"),
)
_HINT = re.compile("|".join(re.escape(hint) for hint in _HINTS))


def _may_hold_a_shape(value: str) -> bool:
    return _HINT.search(value.lower()) is not None  # lowered as `names_credential` lowers a key


# Controllers' wording repeats across a cluster's objects (`Deployment has minimum
# availability.` on every Deployment, `true` in annotations): a short text is masked once
# and remembered (of the 57,000 texts a warm-up of the default bench cluster masks, 14,000
# differ). Short texts only, so the cache stays under a megabyte.
_REMEMBERED_LENGTH = 256


@functools.lru_cache(maxsize=1024)
def _remembered(value: str) -> str:
    return _masked_shapes(value)


def _masked_shapes(value: str) -> str:
    value = _without_pem(value)
    value = _USERINFO.sub(rf"\g<scheme>{REDACTED}@", value)
    value = _AUTHORIZATION.sub(_authorization, value)
    value = _BARE_SCHEME.sub(_bare_scheme, value)
    value = _TOKENS.sub(REDACTED, value)
    value = _mask_values(_ASSIGNMENT, _VALUE, value)
    value = _mask_values(_FLAG, _FLAG_VALUE, value)
    value = _SHORT_PASSWORD.sub(f"-p{REDACTED}", value)
    value = _BARE.sub(_bare_keyword, value)
    return _DENIAL.sub(rf"\g<head> {REDACTED}", value)


def truncate(value: str, limit: int = MAX_TEXT_BYTES) -> str:
    """At most `limit` bytes of UTF-8, cut on a character boundary, then a marker.

    The marker says how many bytes of the original value were left out:
    `<first bytes>…[truncated N bytes]`.
    """
    encoded = value.encode()
    if len(encoded) <= limit:
        return value
    # A cut inside a multi-byte character leaves a partial sequence at the end; drop it.
    head = encoded[:limit].decode(errors="ignore")
    return f"{head}…[truncated {len(encoded) - len(head.encode())} bytes]"


# -- the rewrites ---------------------------------------------------------------------------


def _without_pem(value: str) -> str:
    """Every PEM block as one marker; a block cut at either end is masked to that end."""
    out: list[str] = []
    at = 0
    first_end = _PEM_END.search(value)
    first_begin = _PEM_BEGIN.search(value)
    if first_end is not None and (first_begin is None or first_end.start() < first_begin.start()):
        out.append(REDACTED)  # the text starts inside a block (a log's tail)
        at = first_end.end()
    while (begin := _PEM_BEGIN.search(value, at)) is not None:
        out.append(value[at : begin.start()])
        end = _PEM_END.search(value, begin.end())
        out.append(f"-----BEGIN {begin['label']}-----{REDACTED}")
        if end is None:
            return "".join(out)
        out.append(end.group())
        at = end.end()
    out.append(value[at:])
    return "".join(out)


def _authorization(found: re.Match[str]) -> str:
    value = found["value"]
    if found["sep"].strip() == "" and found["scheme"] is None:
        return found.group()  # `authorization failed`: a word, not a header
    if value.strip() == REDACTED:
        return found.group()
    return f"{found['name']}{found['sep']}{found['scheme'] or ''}{REDACTED}"


def _bare_scheme(found: re.Match[str]) -> str:
    value = found["value"]
    tail = value[1:]
    looks_made_up = (
        any(c.isdigit() for c in value)
        or any(not c.isalnum() for c in value)
        or (any(c.isupper() for c in tail) and any(c.islower() for c in tail))
    )
    return f"{found['scheme']} {REDACTED}" if looks_made_up else found.group()


def _mask_values(key: re.Pattern[str], then: re.Pattern[str], value: str) -> str:
    """The value (`then`) after each key (`key`) that names a credential, masked.

    A value is read only after such a key, and the search goes on after it; after any other
    key it goes on right after the separator, so assignments inside that key's value are
    found (`exec: "/app --password=x"`, `a=token=x`) and no text is scanned twice.
    """
    out: list[str] = []
    copied = 0  # the text before this is in `out`
    at = 0
    while (found := key.search(value, at)) is not None:
        at = found.end()
        if not names_credential(found["key"]):
            continue
        secret = then.match(value, at)
        if secret is None or secret.group() == REDACTED:
            continue
        out += [value[copied:at], _masked(secret.group())]
        copied = at = secret.end()
    out.append(value[copied:])
    return "".join(out)


def _masked(value: str) -> str:
    """`[REDACTED]` in the value's place; a quoted value keeps its quotes, so the text
    around it still reads as it did."""
    quote = value[0] if value[0] in "\"'" else ""
    closing = quote if len(value) > 1 and value.endswith(quote) else ""
    return f"{quote}{REDACTED}{closing}"


def _bare_keyword(found: re.Match[str]) -> str:
    """The words after a bare keyword masked, unless the first is an ordinary one; a second
    ordinary word stays."""
    first, second = found["first"], found["second"]
    if _ordinary(first):
        return found.group()
    rest = f"{found['gap']}{second}" if second is not None and _ordinary(second) else ""
    return f"{found['key']}{found['sep']}{REDACTED}{rest}"


def _ordinary(word: str) -> bool:
    return word.lower() in _ORDINARY or word == REDACTED
