"""Warning Event messages as they may be shipped: the fixed wording kept, free text redacted.

A kubelet's or controller's message mixes its own fixed wording with text nobody vetted:
an exec probe's message is the command's output, a lifecycle hook's names its command, an
admission webhook's denial can quote the request's fields, a CSI driver or CNI plugin
writes what it likes. So a message is matched against the formats Kubernetes writes
(`pkg/kubelet/prober`, `pkg/kubelet/lifecycle`, `pkg/volume/util/operationexecutor`,
`pkg/kubelet/kuberuntime`, the ReplicaSet and Job controllers, the quota admission
plugin); what those formats fix is kept (probe kind and failure class, HTTP status code,
gRPC status, volume, Secret, ConfigMap and claim names, quota names and amounts, webhook
names), an exec probe's output and a hook's command go whole, and the rest goes through
the change-cause filter (`collector.sanitize.change_cause`): plain words stay, quoted
values, assignments and what follows them become `[REDACTED]`. Whatever comes out then goes
through the free-text redactor (`collector.redact`) like every other free-text field:
credentials in URLs, headers, token formats, `-pVALUE`, and an admission denial's reason.

client-go's event correlator merges ten Events of one object and reason that differ only in
their message, within ten minutes, into one Event of its own whose message is the latest
one after `(combined from similar events): `; such a message is read as the one after the
prefix, and keeps the prefix.

Pure and total: any text gives a result, the same text the same result.
"""

from __future__ import annotations

import re

from collector import redact as free_text
from collector.redact import REDACTED
from collector.sanitize import change_cause

# A Kubernetes object name (DNS subdomain); anything else in a name's place is not one.
_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
# How kubelets name a pod (`format.Pod`): `name_namespace(uid)`.
_POD = re.compile(r"(?P<name>[^_()]+)_(?P<ns>[^_()]+)\((?P<uid>[0-9a-f-]*)\)")
# Quota amounts: `requests.cpu=500m,limits.memory=1Gi`.
_AMOUNTS = re.compile(r"[A-Za-z0-9./_-]+=[0-9A-Za-z.]+(,[A-Za-z0-9./_-]+=[0-9A-Za-z.]+)*")

_PROBE = re.compile(
    r"(?P<kind>Liveness|Readiness|Startup) probe (?P<how>failed|errored):\s*(?P<out>.*)", re.S
)
_HTTP_STATUS = re.compile(r"HTTP probe failed with statuscode: \d{3}")
_GRPC_STATUS = re.compile(r'service unhealthy \(responded with "[A-Z_]+"\)')
# What a network probe's error says went wrong (Go's net and net/http wording).
_FAILURE_CLASSES = (
    "connection refused",
    "connection reset by peer",
    "no route to host",
    "network is unreachable",
    "i/o timeout",
    "context deadline exceeded",
    "Client.Timeout exceeded while awaiting headers",
    "server gave HTTP response to HTTPS client",
    "stopped after 10 redirects",
    "EOF",
)
_GRPC_TIMEOUT = re.compile(r"timeout: failed to connect service .* within \d+(\.\d+)?m?s")

_HOOK = re.compile(
    r"(?P<kind>Exec|HTTP|Sleep) lifecycle hook \((?P<handler>.*?)\)"
    r' for Container "(?P<container>[^"]*)" in Pod "(?P<pod>[^"]*)"'
    r" failed - error: (?P<error>.*?)(?P<output>, message: .*)?",
    re.S,
)
_HOOK_EXIT = re.compile(r"command .* exited with (?P<code>\d+): ?")

_VOLUME = re.compile(
    r'(?P<op>[A-Za-z]+\.[A-Za-z]+) failed for volume "(?P<volume>[^"]*)"\s*(?::\s*)?(?P<error>.*)',
    re.S,
)
_UNABLE = re.compile(
    r"Unable to attach or mount volumes: unmounted volumes=\[(?P<unmounted>[^\]]*)\],"
    r" unattached volumes=\[(?P<unattached>[^\]]*)\]: (?P<error>.*)",
    re.S,
)
_MULTI_ATTACH = re.compile(r'Multi-Attach error for volume "(?P<volume>[^"]*)" (?P<rest>.*)', re.S)
_NOT_FOUND = re.compile(
    r"(?P<what>secrets?|configmaps?|persistentvolumeclaims?|serviceaccounts?|csidrivers?)"
    r' "(?P<name>[^"]*)" not found'
)
_NOT_REGISTERED = re.compile(r'object "(?P<ns>[^"]*)"/"(?P<name>[^"]*)" not registered')
_RPC = re.compile(r"rpc error: code = (?P<code>[A-Za-z]+) desc = (?P<desc>.*)", re.S)

_SANDBOX = re.compile(r"Failed to create pod sandbox: (?P<error>.*)", re.S)
_NETWORK = re.compile(
    r"network is not ready: container runtime network not ready: NetworkReady=(?P<ready>\w+)"
    r" reason:(?P<reason>\w*) message:(?P<message>.*)",
    re.S,
)

_CREATE = re.compile(r"Error creating: (?P<error>.*)", re.S)
_QUOTA = re.compile(
    r'pods "(?P<pod>[^"]*)" is forbidden: exceeded quota: (?P<quota>[^,]+),'
    r" requested: (?P<requested>\S+), used: (?P<used>\S+), limited: (?P<limited>\S+)"
)
_WEBHOOK = re.compile(r'admission webhook "(?P<hook>[^"]*)" denied the request(?P<why>:.*)?', re.S)
_FORBIDDEN = re.compile(r'pods "(?P<pod>[^"]*)" is forbidden: (?P<why>.*)', re.S)
# What client-go's EventAggregator puts before the message of an Event it merged others into.
COMBINED = "(combined from similar events): "


def redact(message: str | None) -> str:
    """The message as it may leave the cluster (see the module docstring)."""
    prefix, text = _merged(message)
    for pattern, rewrite in _FORMATS:
        found = pattern.fullmatch(text)
        if found is not None:
            return free_text.text(prefix + rewrite(found))
    return free_text.text(prefix + _free(text))


def probe_kind(message: str | None) -> str | None:
    """`Liveness`, `Readiness` or `Startup`: which probe an `Unhealthy` message is about."""
    found = _PROBE.match(_merged(message)[1])
    return found.group("kind") if found else None


def _merged(message: str | None) -> tuple[str, str]:
    """(the merged Event's prefix or "", the message as its writer wrote it)."""
    text = (message or "").strip()
    if not text.startswith(COMBINED):
        return "", text
    return COMBINED, text[len(COMBINED) :].strip()


# -- the formats --------------------------------------------------------------------------


def _probe(found: re.Match[str]) -> str:
    return f"{found['kind']} probe {found['how']}: {_probe_failure(found['out'])}"


def _probe_failure(output: str) -> str:
    """The failure class of a probe's output; an exec probe's output is the program's own,
    so nothing of it is kept unless it is one of the prober's fixed sentences."""
    for fixed in (_HTTP_STATUS, _GRPC_STATUS):
        found = fixed.search(output)
        if found is not None:
            return found.group()
    if _GRPC_TIMEOUT.search(output):
        return "timeout: failed to connect service"
    classes = [phrase for phrase in _FAILURE_CLASSES if phrase in output]
    return ", ".join(classes) if classes else REDACTED


def _hook(found: re.Match[str]) -> str:
    container, pod = _name(found["container"]), _pod_name(found["pod"])
    exit_code = _HOOK_EXIT.match(found["error"])
    error = f"exited with {exit_code['code']}" if exit_code else _free(found["error"])
    text = (
        f"{found['kind']} lifecycle hook ({REDACTED}) for Container {container} in Pod {pod}"
        f" failed - error: {error}"
    )
    return text + (f", message: {REDACTED}" if found["output"] else "")


def _volume(found: re.Match[str]) -> str:
    op = found["op"] if re.fullmatch(r"[A-Za-z]+\.[A-Za-z]+", found["op"]) else REDACTED
    error = _volume_error(found["error"])
    return f"{op} failed for volume {_name(found['volume'])}" + (f" : {error}" if error else "")


def _volume_error(error: str) -> str:
    for pattern in (_NOT_FOUND, _NOT_REGISTERED):
        found = pattern.search(error)
        if found is not None:
            if pattern is _NOT_FOUND:
                return f"{found['what']} {_name(found['name'])} not found"
            return f"object {_name(found['ns'])}/{_name(found['name'])} not registered"
    return _rpc_or_free(error)


def _unable(found: re.Match[str]) -> str:
    return (
        f"Unable to attach or mount volumes: unmounted volumes=[{_names(found['unmounted'])}],"
        f" unattached volumes=[{_names(found['unattached'])}]: {_free(found['error'])}"
    )


def _multi_attach(found: re.Match[str]) -> str:
    return f"Multi-Attach error for volume {_name(found['volume'])} {_free(found['rest'])}"


def _sandbox(found: re.Match[str]) -> str:
    return f"Failed to create pod sandbox: {_rpc_or_free(found['error'])}"


def _network(found: re.Match[str]) -> str:
    return (
        "network is not ready: container runtime network not ready:"
        f" NetworkReady={_word(found['ready'])} reason:{_word(found['reason'])}"
        f" message:{_free(found['message'])}"
    )


def _create(found: re.Match[str]) -> str:
    error = found["error"]
    quota = _QUOTA.fullmatch(error)
    if quota is not None:
        amounts = [_amounts(quota[part]) for part in ("requested", "used", "limited")]
        return (
            f"Error creating: pods {_pod_name(quota['pod'])} is forbidden: exceeded quota:"
            f" {_bare_name(quota['quota'])}, requested: {amounts[0]}, used: {amounts[1]},"
            f" limited: {amounts[2]}"
        )
    webhook = _WEBHOOK.search(error)
    if webhook is not None:
        # The reason, the webhook's own text, is masked whole by the redactor.
        why = f": {REDACTED}" if webhook["why"] else ""
        return f"Error creating: admission webhook {_name(webhook['hook'])} denied the request{why}"
    forbidden = _FORBIDDEN.fullmatch(error)
    if forbidden is not None:
        return (
            f"Error creating: pods {_pod_name(forbidden['pod'])} is forbidden:"
            f" {_free(forbidden['why'])}"
        )
    return f"Error creating: {_free(error)}"


_FORMATS = (
    (_PROBE, _probe),
    (_HOOK, _hook),
    (_UNABLE, _unable),
    (_MULTI_ATTACH, _multi_attach),
    (_VOLUME, _volume),
    (_SANDBOX, _sandbox),
    (_NETWORK, _network),
    (_CREATE, _create),
)


# -- pieces -------------------------------------------------------------------------------


def _free(text: str) -> str:
    """Text of unknown origin, filtered the way recorded command lines are."""
    return change_cause(text.strip())


def _rpc_or_free(error: str) -> str:
    rpc = _RPC.fullmatch(error.strip())
    if rpc is None:
        return _free(error)
    return f"rpc error: code = {_word(rpc['code'])} desc = {_free(rpc['desc'])}"


def _name(name: str) -> str:
    """A quoted object name, as Go's %q writes it, or the marker when it is not a name."""
    return f'"{name}"' if _NAME.fullmatch(name) else REDACTED


def _bare_name(name: str) -> str:
    """An object name written without quotes (a quota's)."""
    return name if _NAME.fullmatch(name) else REDACTED


def _pod_name(name: str) -> str:
    """A pod as kubelets name it (`name_namespace(uid)`), or a bare pod name."""
    namespaced = _POD.fullmatch(name)
    if namespaced is None:
        return _name(name)
    return (
        f'"{name}"'
        if all(_NAME.fullmatch(namespaced[part]) for part in ("ns", "name"))
        else REDACTED
    )


def _names(names: str) -> str:
    return " ".join(word if _NAME.fullmatch(word) else REDACTED for word in names.split())


def _amounts(amounts: str) -> str:
    return amounts if _AMOUNTS.fullmatch(amounts) else REDACTED


def _word(word: str) -> str:
    return word if re.fullmatch(r"\w*", word) else REDACTED
