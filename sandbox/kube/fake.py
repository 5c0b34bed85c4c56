"""`FakeKube`: the fake Kubernetes API server as tests and benchmarks drive it.

It owns the store, the pager, the fault plans and the HTTP listener on 127.0.0.1, and
offers the Python side of the fake: writing objects as a controller would (these writes
produce watch events like any other), reading them back, scripting faults, inspecting the
request log, and producing a kubeconfig or a client `Configuration` for the official
client. Python-side writes change whatever they are given, `.status` included, with the
kind's defaults filled in on creates and updates (every object a real server holds has
them); only HTTP writes are decoded, validated (`admission`) and authenticated, and follow
the status-subresource rules.

Streaming lists (watches with `sendInitialEvents`) are served, refused or ignored as
`streaming_lists` says, and `drop_initial_events` cuts one short. Hostile servers are
scripted per resource: `expire_watches` (a 410 for every watch), `endless_lists` (a continue
token that never ends), `cut_streams` (streams that end inside a line). Refusals raise
`ApiError` (the same Status the HTTP answer would carry); unknown resource
names raise `KeyError`. The `kubernetes` package is imported only by the two helpers that
need it, so a process that runs the fake does not pay for the client's models.
"""

from __future__ import annotations

import base64
import builtins
import functools
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from sandbox.kube import (
    auth,
    defaulting,
    garbage,
    hpa_controller,
    namespaces,
    resources,
)
from sandbox.kube.auth import Tokens
from sandbox.kube.controllers import Controllers
from sandbox.kube.deletion import DeleteOptions
from sandbox.kube.faults import Faults, RequestLog, RequestRecord
from sandbox.kube.lists import Pager, matcher
from sandbox.kube.options import STREAMING_LIST_MODES
from sandbox.kube.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from sandbox.kube.podlogs import PodLogs
from sandbox.kube.rbac import BOOTSTRAP, Authorizer
from sandbox.kube.resources import Resource
from sandbox.kube.selectors import FieldSelector, LabelSelector
from sandbox.kube.server import (
    WATCH_EXPIRED_MODES,
    Backend,
    KubeServer,
    Router,
    Settings,
)
from sandbox.kube.status import ApiError, unprocessable
from sandbox.kube.store import Bookmark, Store
from sandbox.kube.watch import DROP, EXPIRE, STOP, Stall
from sandbox.serving import HOST

CONTROLLER_MODULES = (garbage, hpa_controller, namespaces)  # importing a controller registers it

if TYPE_CHECKING:
    from kubernetes.client import Configuration

    from sandbox.tls import TLSAuthority

_encode = msgspec.json.encode
_decode = msgspec.json.decode
ResourceName = str | Resource

_PATCH_TYPES = {"merge": merge_patch, "strategic": strategic_merge_patch, "json": json_patch}


def _copy(obj: Any) -> Any:
    # Deep copy through JSON: the store takes ownership and never aliases the caller's dict.
    return _decode(_encode(obj))


def _defaulted(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    # Every object a real server holds has its kind's defaults, however it was written.
    return defaulting.apply(resource.api_version, resource.kind, obj)


class FakeKube:
    """A fake Kubernetes API server on 127.0.0.1 (port 0 picks a free one).

    `bookmark_interval`: seconds between BOOKMARK events on watches that allow them (0
    disables them; `bookmark_now()` still works); a bookmark is sent only when the
    resourceVersion moved past what the watch already told, and once more
    `bookmark_before_timeout` seconds before the watch times out. Events get none: the real
    server watches them from etcd, outside its watch cache. `history`: changes kept
    per resource for watches to replay and exact lists to rebuild from; `history_seconds`:
    how long each is kept (a real server compacts about every 5 minutes) on `clock`
    (monotonic seconds; tests pass one they move); older resourceVersions answer 410.
    `min_request_timeout`: a watch without `timeoutSeconds` ends after 1-2x this, as the
    real server's `--min-request-timeout`. `watch_expired`: how a watch from
    a too-old resourceVersion is refused, "event" (200 and one ERROR event, what real
    servers do) or "http" (a 410 answer). `max_list_snapshots`: paginated lists in progress
    whose continue tokens stay valid.

    `streaming_lists`: what a watch with `sendInitialEvents` meets. "serve" (a server with
    the WatchList feature on, as kube-apiserver 1.32 and 1.34 on are by default): its
    options are checked as upstream (422 Invalid), it streams the current objects as ADDED
    events, then (with `allowWatchBookmarks=true`) a BOOKMARK annotated
    `k8s.io/initial-events-end` at the resourceVersion they were taken at, then changes; a
    legacy watch from resourceVersion ""/"0" that allows bookmarks gets that bookmark too,
    as upstream defaults it to a streaming list. "refuse" (the feature off): 422 Invalid,
    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is
    enabled". "ignore" (a server that predates or ignores the parameters): the watch is
    served as if `sendInitialEvents` and `resourceVersionMatch` were absent, so no
    annotated bookmark ever comes. `too_large_rv_wait`: how long a list or streaming list
    for a resourceVersion the fake has not reached waits for it before its 504 (3 s
    upstream; a streaming list gets it as an ERROR event).
    `controllers`: names from `controllers.REGISTRY` to run from the start; the namespace
    controller always runs (a namespace marked for deletion is emptied, then goes).
    `system_namespaces`: `default`, `kube-system` and `kube-public` exist from the start
    and after `reset()`, as in a real cluster (off: a test creates the namespaces it uses,
    since an HTTP create into a missing namespace is 404).
    `rbac`: authorize every HTTP request from the Roles, ClusterRoles and bindings stored
    in the fake (`enable_rbac`); off, every authenticated request is allowed.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        bookmark_interval: float = 1.0,
        history: int = 1000,
        history_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        watch_expired: str = "event",
        max_list_snapshots: int = 32,
        git_version: str = "v1.37.1",
        request_log_limit: int = 100_000,
        streaming_lists: str = "serve",
        too_large_rv_wait: float = 3.0,
        min_request_timeout: float = 1800.0,
        bookmark_before_timeout: float = 2.0,
        controllers: Iterable[str] = (),
        tokens: Mapping[str, str] | None = None,
        system_namespaces: bool = False,
        rbac: bool = False,
    ) -> None:
        _check_mode(watch_expired)
        _check_streaming_mode(streaming_lists)
        self._port = port
        self._defaults = (bookmark_interval, watch_expired, git_version, streaming_lists)
        self._store = Store(history, history_seconds, clock)
        self._pager = Pager(self._store, max_list_snapshots)
        self._faults = Faults()
        self._log = RequestLog(request_log_limit)
        self._pod_logs = PodLogs()
        self._default_tokens = dict(tokens or {auth.DEFAULT_TOKEN: auth.DEFAULT_USER})
        self._tokens = Tokens(self._default_tokens)
        self._authorizer = Authorizer(self._store)
        self._default_rbac = rbac
        self._controllers = Controllers(self._store)
        self._default_controllers = tuple(dict.fromkeys((namespaces.CONTROLLER, *controllers)))
        self._system_namespaces = system_namespaces
        self._seed_namespaces()
        for name in self._default_controllers:
            self._controllers.enable(name)
        if rbac:
            self.enable_rbac()
        self._settings = Settings(
            bookmark_interval,
            watch_expired,
            git_version,
            streaming_lists,
            too_large_rv_wait,
            min_request_timeout,
            bookmark_before_timeout,
        )
        self._backend = Backend(
            self._store,
            self._pager,
            self._faults,
            self._log,
            self._pod_logs,
            self._settings,
            self._tokens,
            self._authorizer,
        )
        self._stalls: list[threading.Event] = []
        self._stalls_lock = threading.Lock()
        self._server: KubeServer | None = None
        self._thread: threading.Thread | None = None
        self._lifecycle = threading.Lock()
        self._lifecycle_tls = threading.Lock()
        self._server_context: ssl.SSLContext | None = None

    # lifecycle ----------------------------------------------------------------------------

    def start(self) -> FakeKube:
        with self._lifecycle:
            if self._server is None:
                server = KubeServer(self._port, Router(self._backend), self._tls_context)
                self._port = server.server_address[1]
                thread = threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.05},
                    name=f"fake-kube-{self._port}",
                    daemon=True,
                )
                thread.start()
                self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        """End every watch and dripped answer, close the listener and all connections."""
        with self._lifecycle:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            self._store.post(None, lambda _: STOP)
            self.release_stalled()
            self._faults.end_drips()
            server.shutdown()
            server.server_close()
            server.cut_connections()
            thread.join()
            self._server = self._thread = None

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the fake API server has not been started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def git_version(self) -> str:
        """The version `/version` reports."""
        return self._settings.git_version

    @property
    def https_url(self) -> str:
        """The same server over TLS (the port answers both), certified by `tls`."""
        return f"https://{HOST}:{self.port}"

    @functools.cached_property
    def tls(self) -> TLSAuthority:
        """The throw-away CA of the TLS side, made on first use (kubeconfig or handshake)."""
        from sandbox.tls import TLSAuthority  # trustme is needed only for TLS

        return TLSAuthority()

    def _tls_context(self) -> ssl.SSLContext:
        with self._lifecycle_tls:
            if self._server_context is None:
                self._server_context = self.tls.server_context()
            return self._server_context

    def reset(self) -> None:
        """Back to an empty cluster with the constructor's settings; open watches and
        dripped answers end, scripted faults are forgotten.

        The resourceVersion keeps counting up, so an RV remembered from before the reset
        is too old (410) rather than accidentally valid.
        """
        self._store.clear(last_item=STOP)
        self.release_stalled()
        self._pager.expire_all()
        self._faults.clear()
        self._log.clear()
        self._pod_logs.clear()
        interval, mode, version, streaming = self._defaults
        self._settings.bookmark_interval = interval
        self._settings.watch_expired = mode
        self._settings.git_version = version
        self._settings.streaming_lists = streaming
        self._settings.watch_expired_for.clear()
        self._settings.streaming_lists_for.clear()
        self._tokens.reset(self._default_tokens)
        for name in self._controllers.running():
            self._controllers.disable(name)
        for name in self._default_controllers:
            self._controllers.enable(name)
        self._seed_namespaces()
        self._authorizer.disable()
        if self._default_rbac:
            self.enable_rbac()

    def _seed_namespaces(self) -> None:
        if self._system_namespaces:
            for name in namespaces.PROTECTED:
                self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # authentication -----------------------------------------------------------------------

    @property
    def token(self) -> str:
        """A token the fake accepts (the first one it was given)."""
        return next(iter(self._default_tokens))

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header of `token`, for raw HTTP clients."""
        return {"Authorization": f"Bearer {self.token}"}

    def add_token(self, token: str, user: str) -> None:
        """Accept `token` as `user` from now on (a new or rotated ServiceAccount token)."""
        self._tokens.add(token, user)

    def remove_token(self, token: str) -> None:
        """Refuse `token` from now on (401), as after a rotation or a deleted ServiceAccount."""
        self._tokens.remove(token)

    # authorization ------------------------------------------------------------------------

    def enable_rbac(self) -> None:
        """Authorize every HTTP request from the RBAC objects stored here, as a cluster's
        RBAC authorizer does; the bootstrap discovery roles are created if missing."""
        for obj in BOOTSTRAP:
            resource = resources.for_object(obj)
            try:
                self._store.get(resource, None, obj["metadata"]["name"])
            except ApiError:
                self.create(obj)
        self._authorizer.enable()

    def disable_rbac(self) -> None:
        """Allow every authenticated request again (the default)."""
        self._authorizer.disable()

    # controllers ------------------------------------------------------------------------

    def enable_controller(self, name: str) -> None:
        """Start a controller of `controllers.REGISTRY` (KeyError names the known ones)."""
        self._controllers.enable(name)

    def disable_controller(self, name: str) -> None:
        self._controllers.disable(name)

    # objects ------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object (its `apiVersion`/`kind` say where); returns it as stored. No
        admission, so seeding into a namespace that does not exist (or is terminating)
        works here, where an HTTP create is refused."""
        resource = resources.for_object(obj)
        return self._full(resource, self._store.create(resource, _defaulted(resource, _copy(obj))))

    def load(self, objects: Iterable[dict[str, Any]]) -> int:
        """Bulk create-or-replace (fixtures, synthetic clusters); returns how many. The
        dicts are taken over by the store, not copied, and stored as given (no defaults:
        synthetic objects come complete, partly as pre-encoded `msgspec.Raw`)."""
        count = 0
        batch: list[dict[str, Any]] = []
        current: Resource | None = None
        for obj in objects:
            resource = resources.for_object(obj)
            if resource is not current and batch:
                assert current is not None
                count += self._store.create_many(current, batch)
                batch = []
            current = resource
            batch.append(obj)
            if len(batch) >= 1000:
                count += self._store.create_many(resource, batch)
                batch = []
        if batch and current is not None:
            count += self._store.create_many(current, batch)
        return count

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an object; a `metadata.resourceVersion` it carries must be current (409),
        and a Lease must carry one (422), as for a PUT (`Store.modify`)."""
        resource = resources.for_object(obj)
        metadata = obj.get("metadata") or {}
        replacement = _defaulted(resource, _copy(obj))
        entry = self._store.modify(
            resource, metadata.get("namespace"), metadata.get("name", ""), lambda _: replacement
        )
        return self._full(resource, entry)

    def patch(
        self,
        resource: ResourceName,
        namespace: str | None,
        name: str,
        patch: dict[str, Any] | list[dict[str, Any]],
        *,
        patch_type: str | None = None,
    ) -> dict[str, Any]:
        """Patch an object: "strategic" (default for a dict), "merge", or "json" (a list)."""
        target = resources.resolve(resource)
        kind = patch_type or ("json" if isinstance(patch, list) else "strategic")
        if kind not in _PATCH_TYPES:
            raise ValueError(f"patch_type must be one of {', '.join(_PATCH_TYPES)}")
        patcher, body = _PATCH_TYPES[kind], _copy(patch)

        def apply(current: dict[str, Any]) -> Any:
            try:
                return patcher(current, body)
            except PatchError as error:
                raise unprocessable() from error

        return self._full(target, self._store.modify(target, namespace, name, apply))

    def delete(
        self,
        resource: ResourceName,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
    ) -> dict[str, Any]:
        """Delete as a client's DELETE does (no admission: protected namespaces too):
        returns the last state of an object that went, or the object marked for deletion
        when finalizers (or, for a namespace, the namespace controller) must act first."""
        target = resources.resolve(resource)
        options = DeleteOptions(propagation=propagation_policy)
        entry, _ = self._store.delete(target, namespace, name, options)
        return self._full(target, entry)

    def get(self, resource: ResourceName, namespace: str | None, name: str) -> dict[str, Any]:
        target = resources.resolve(resource)
        return self._full(target, self._store.get(target, namespace, name))

    def list(
        self,
        resource: ResourceName,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Objects in key order, across all namespaces when `namespace` is None."""
        target = resources.resolve(resource)
        match = matcher(
            LabelSelector.parse(label_selector), FieldSelector.parse(field_selector, target)
        )
        _, entries = self._store.snapshot(target, namespace)
        return [self._full(target, e) for e in entries if match is None or match(e)]

    def set_pod_log(
        self, namespace: str, pod: str, container: str, text: str, *, previous: bool = False
    ) -> None:
        """What `pods/{pod}/log?container=...` returns (`previous=True`: the last run's)."""
        self._pod_logs.set(namespace, pod, container, text, previous)

    @staticmethod
    def _full(resource: Resource, entry: Any) -> dict[str, Any]:
        obj: dict[str, Any] = _decode(entry.full(resource))
        return obj

    # resourceVersions and history ---------------------------------------------------------

    @property
    def current_rv(self) -> int:
        return self._store.current_rv

    def compact(self, rv: int | None = None) -> int:
        """Drop watch history at or below `rv` (default: now) and expire every outstanding
        continue token, like an etcd compaction; returns the compaction RV."""
        compacted = self._store.compact(rv)
        self._pager.expire_all()
        return compacted

    def expire_continue_tokens(self) -> int:
        """Make every outstanding continue token answer 410; returns how many lists."""
        return self._pager.expire_all()

    # watches ------------------------------------------------------------------------------

    def open_watches(self, resource: ResourceName | None = None) -> int:
        return self._store.watch_count(_maybe(resource))

    def wait_for_watches(
        self, count: int = 1, resource: ResourceName | None = None, timeout: float = 5.0
    ) -> None:
        """Block until at least `count` watches are open (a test's watch is really listening)."""
        target = _maybe(resource)
        deadline = time.monotonic() + timeout
        while self._store.watch_count(target) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self._store.watch_count(target)} watches open after {timeout}s, "
                    f"wanted {count}"
                )
            time.sleep(0.01)

    def bookmark_now(self, resource: ResourceName | None = None) -> int:
        """Send a BOOKMARK now on every watch that allows them; returns how many. A watch
        already told of the current resourceVersion skips it, as a real one would, and so
        does one of a resource outside the watch cache (Events), which never gets one."""
        store = self._store
        return store.post(
            _maybe(resource),
            lambda sub: (
                Bookmark(store.current_rv) if sub.bookmarks and sub.resource.watch_cache else None
            ),
        )

    def end_watches(self, resource: ResourceName | None = None) -> int:
        """End open watches cleanly now, before their timeout, as a server going away ends
        them; returns how many."""
        return self._store.post(_maybe(resource), lambda _: STOP)

    def drop_watches(self, resource: ResourceName | None = None) -> int:
        """Shut down open watch connections mid-stream (no clean end); returns how many."""
        return self._store.post(_maybe(resource), lambda _: DROP)

    def expire_open_watches(self, resource: ResourceName | None = None) -> int:
        """Open watches send an ERROR event with a 410 Expired Status mid-stream (what came
        before it still goes out), then end cleanly: the history they would resume from is
        gone. Returns how many."""
        return self._store.post(_maybe(resource), lambda _: EXPIRE)

    def stall_watches(self, resource: ResourceName | None = None) -> int:
        """Open watches stop sending anything (bookmarks included) and keep the connection
        open until `release_stalled()` or the client gives up; returns how many."""
        release = threading.Event()
        with self._stalls_lock:
            self._stalls.append(release)
        return self._store.post(_maybe(resource), lambda _: Stall(release))

    def release_stalled(self) -> None:
        """Drop the connections of stalled watches (they never resume sending)."""
        with self._stalls_lock:
            stalls, self._stalls = self._stalls, []
        for release in stalls:
            release.set()

    def set_watch_expired_mode(self, mode: str, resource: ResourceName | None = None) -> None:
        """ "event" or "http", for one resource or as the default for all."""
        _check_mode(mode)
        if resource is None:
            self._settings.watch_expired = mode
        else:
            self._settings.watch_expired_for[resources.resolve(resource)] = mode

    def set_streaming_lists(self, mode: str, resource: ResourceName | None = None) -> None:
        """ "serve", "refuse" or "ignore" (see the class), for one resource or as the default
        for all; watches already open keep how they started."""
        _check_streaming_mode(mode)
        if resource is None:
            self._settings.streaming_lists = mode
        else:
            self._settings.streaming_lists_for[resources.resolve(resource)] = mode

    def drop_initial_events(self, resource: ResourceName, *, after: int = 0) -> None:
        """The next streaming list of `resource` (a watch whose initial events end with the
        annotated bookmark) sends `after` initial events (all of them if there are fewer),
        then its connection drops without a clean end, before the bookmark. Scripted twice,
        it cuts two lists; `clear_faults()` forgets it."""
        self._faults.drop_initial_events(resources.resolve(resource), after)

    def expire_watches(self, resource: ResourceName) -> None:
        """Every watch of `resource` from a resourceVersion answers 410 Expired (an ERROR
        event or an HTTP answer, as `set_watch_expired_mode` says), however recent the
        resourceVersion, until `clear_faults()`: a server whose history is always gone.
        Lists and streaming lists are served as usual."""
        self._faults.expire_watches(resources.resolve(resource))

    def endless_lists(self, resource: ResourceName, mode: str = "restart") -> None:
        """Lists of `resource` never end until `clear_faults()`: the last page carries a
        continue token all the same (`faults.ENDLESS_LIST_MODES`: "repeat" answers with the
        token it was asked with; "restart" with one that starts the list over, a new one
        each time; "uncounted" likewise, without `remainingItemCount`)."""
        self._faults.endless_lists(resources.resolve(resource), mode)

    def cut_streams(self, resource: ResourceName, *, after: int = 0) -> None:
        """Every watch stream of `resource` that starts from now on (streaming lists
        included) sends `after` whole lines, then half of the next one, and ends its body
        cleanly there, until `clear_faults()`."""
        self._faults.cut_streams(resources.resolve(resource), after)

    @property
    def bookmark_interval(self) -> float:
        return self._settings.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self._settings.bookmark_interval = seconds

    # faults and the request log ----------------------------------------------------------

    def fail_next(
        self,
        status: int,
        count: int = 1,
        *,
        resource: ResourceName | None = None,
        path_prefix: str | None = None,
        retry_after: int = 1,
        verb: str | None = None,
    ) -> None:
        """The next `count` requests matching `resource`, `path_prefix` and/or `verb` (any
        request if none is given) answer `status` with the real server's Status for it; a
        429 carries `Retry-After: retry_after`. `verb` is the Kubernetes verb (`get`,
        `list`, `watch`, `create`, `update`, `patch`, `delete`). A failure takes precedence
        over a `drip_next` the same request matches, which then waits for the next one."""
        self._faults.fail_next(status, count, _maybe(resource), path_prefix, retry_after, verb)

    def drip_next(
        self,
        count: int = 1,
        *,
        resource: ResourceName | None = None,
        path_prefix: str | None = None,
        verb: str | None = None,
        every: float = 1.0,
        headers: bool = False,
    ) -> None:
        """The next `count` non-watch requests matching `resource`, `path_prefix` and/or
        `verb` (as for `fail_next`) are handled as usual (a dripped write still changes the
        store, and is logged as usual) but answered one byte every `every` seconds: a hung
        server or proxy that only a client's total deadline ends. With `headers=False` the
        status line and headers leave at once and only the body drips; `headers=True` drips
        them too. A drip ends early, cutting the connection, when the client goes away (seen
        on the next byte's write) or on `clear_faults()`, `reset()` or `stop()`. Watches
        never match (`stall_watches()` hangs them)."""
        self._faults.drip_next(count, _maybe(resource), path_prefix, verb, every, headers)

    def forbid(self, resource: ResourceName) -> None:
        """Every request on `resource` answers 403 until `allow(resource)`."""
        self._faults.forbid(resources.resolve(resource))

    def allow(self, resource: ResourceName) -> None:
        self._faults.allow(resources.resolve(resource))

    def clear_faults(self) -> None:
        """Forget every scripted fault and forbidden kind; end stalls and drips in progress."""
        self._faults.clear()
        self.release_stalled()

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        return self._log.records()

    def clear_requests(self) -> None:
        self._log.clear()

    def stats(self) -> dict[str, Any]:
        """What `GET /_sandbox/stats` answers: the resourceVersion, objects per kind, open
        watches, requests served, continue snapshots kept, and requests waiting for a
        resourceVersion (streaming lists ahead of the fake)."""
        return Router(self._backend).stats()

    # clients ------------------------------------------------------------------------------

    def kubeconfig(
        self,
        path: str | Path,
        *,
        namespace: str = "default",
        token: str | None = None,
        tls: bool = False,
    ) -> Path:
        """Write a kubeconfig for this server; `token` defaults to `self.token`.

        Plain http unless `tls`: then https, with the fake's CA as
        `certificate-authority-data`, which is what kubectl needs before it sends a token.
        """
        path = Path(path)
        cluster: dict[str, Any] = {"server": self.url, "insecure-skip-tls-verify": True}
        if tls:
            authority = base64.b64encode(self.tls.ca_pem).decode("ascii")
            cluster = {"server": self.https_url, "certificate-authority-data": authority}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake", "user": {"token": token or self.token}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
            "preferences": {},
        }
        # JSON is YAML, so every kubeconfig loader reads it.
        path.write_bytes(msgspec.json.format(_encode(config)) + b"\n")
        return path

    def client_configuration(
        self, *, token: str | None = None, ca_bundle: str | Path | None = None
    ) -> Configuration:
        """A `kubernetes.client.Configuration` pointing at this server: plain http, or https
        verified against the fake's CA when `ca_bundle` says where to write that CA (the
        client reads `ssl_ca_cert` from a file)."""
        from kubernetes.client import Configuration

        configuration = Configuration(host=self.url)
        configuration.api_key = {"authorization": f"Bearer {token or self.token}"}
        configuration.verify_ssl = False
        if ca_bundle is not None:
            configuration.host = self.https_url
            configuration.ssl_ca_cert = str(self.tls.write_ca_bundle(ca_bundle))
            configuration.verify_ssl = True
        return configuration


def _maybe(resource: ResourceName | None) -> Resource | None:
    return None if resource is None else resources.resolve(resource)


def _check_mode(mode: str) -> None:
    if mode not in WATCH_EXPIRED_MODES:
        raise ValueError(f"watch_expired must be one of {', '.join(WATCH_EXPIRED_MODES)}")


def _check_streaming_mode(mode: str) -> None:
    if mode not in STREAMING_LIST_MODES:
        raise ValueError(f"streaming_lists must be one of {', '.join(STREAMING_LIST_MODES)}")


__all__ = ["ApiError", "FakeKube", "RequestRecord"]
