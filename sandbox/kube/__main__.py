"""`python -m sandbox.kube`: serve the fake Kubernetes API until SIGTERM or SIGINT.

Prints one line `URL <url>` on stdout once listening (after loading the synthetic cluster
when `--synthetic` is given); timing of the generation goes to stderr. The port answers
plain HTTP and TLS alike; the URL printed is the plain one. `--kubeconfig PATH` also writes
a kubeconfig, https with the fake's CA unless `--no-tls`, since kubectl sends its token
only over TLS. The other switches are the `FakeKube` constructor's: the tokens it accepts,
RBAC, the controllers it runs.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import time

from sandbox.kube import auth, namespaces
from sandbox.kube.controllers import REGISTRY
from sandbox.kube.fake import FakeKube
from sandbox.kube.synthetic import SyntheticSpec, populate


def _user_token(text: str) -> tuple[str, str]:
    token, sep, user = text.partition("=")
    if not (token and sep and user):
        raise argparse.ArgumentTypeError(f"expected TOKEN=USER, got {text!r}")
    return token, user


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = SyntheticSpec()
    parser = argparse.ArgumentParser(
        prog="python -m sandbox.kube",
        description="Serve a fake Kubernetes API on 127.0.0.1 until SIGTERM or SIGINT.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="also write a kubeconfig for the server here")
    parser.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the kubeconfig names https and carries the fake's CA (default); --no-tls: "
        "plain http, over which kubectl sends no token",
    )
    parser.add_argument(
        "--token",
        default=auth.DEFAULT_TOKEN,
        help=f"the token the kubeconfig carries, accepted as {auth.DEFAULT_USER} "
        f"(default {auth.DEFAULT_TOKEN})",
    )
    parser.add_argument(
        "--user-token",
        type=_user_token,
        action="append",
        default=[],
        metavar="TOKEN=USER",
        help="also accept TOKEN as USER (repeatable)",
    )
    parser.add_argument(
        "--rbac",
        action="store_true",
        help="authorize every request from the Roles and bindings stored in the fake",
    )
    parser.add_argument(
        "--controller",
        action="append",
        default=[],
        choices=sorted(set(REGISTRY) - {namespaces.CONTROLLER}),
        help="run this controller too (repeatable; the namespace controller always runs)",
    )
    parser.add_argument("--bookmark-interval", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument(
        "--history", type=int, default=1000, help="changes kept per resource for watches"
    )
    parser.add_argument(
        "--watch-expired",
        choices=("event", "http"),
        default="event",
        help="how a watch from a too-old resourceVersion is refused",
    )
    parser.add_argument("--synthetic", action="store_true", help="load a synthetic cluster")
    for name in ("namespaces", "deployments", "pods", "nodes", "cronjobs", "services"):
        parser.add_argument(
            f"--{name}",
            type=int,
            default=getattr(defaults, name),
            metavar="N",
            help=f"synthetic {name} (default {getattr(defaults, name)})",
        )
    for name, default in (
        ("jobs", "cronjobs / 20"),
        ("hpas", "deployments / 10"),
        ("helm-releases", "deployments / 50"),
    ):
        parser.add_argument(
            f"--{name}", type=int, default=None, metavar="N", help=f"default {default}"
        )
    parser.add_argument(
        "--heavy",
        action="store_true",
        help="add heavy objects: Helm release Secrets near 1 MiB with many revisions, pods "
        "with a ~200 KB last-applied annotation, Deployments of 100 containers",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    kube = FakeKube(
        args.port,
        bookmark_interval=args.bookmark_interval,
        history=args.history,
        watch_expired=args.watch_expired,
        controllers=args.controller,
        tokens={args.token: auth.DEFAULT_USER, **dict(args.user_token)},
        # A synthetic cluster brings its own system namespaces.
        system_namespaces=not args.synthetic,
        rbac=args.rbac,
    )
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked before any thread starts, so every thread inherits the mask and sigwait below
    # is the only place these signals land.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    if args.synthetic:
        spec = SyntheticSpec(
            namespaces=args.namespaces,
            deployments=args.deployments,
            pods=args.pods,
            nodes=args.nodes,
            cronjobs=args.cronjobs,
            services=args.services,
            jobs=args.jobs,
            hpas=args.hpas,
            helm_releases=args.helm_releases,
            seed=args.seed,
            heavy=args.heavy,
        )
        started = time.perf_counter()
        counts = populate(kube, spec)
        # The cluster lives as long as the process: keep it out of every future collection.
        gc.freeze()
        print(
            f"synthetic cluster: {sum(counts.values())} objects in "
            f"{time.perf_counter() - started:.1f}s: "
            + ", ".join(f"{name}={count}" for name, count in sorted(counts.items())),
            file=sys.stderr,
            flush=True,
        )
    kube.start()
    if args.kubeconfig:
        kube.kubeconfig(args.kubeconfig, token=args.token, tls=args.tls)
    print(f"URL {kube.url}", flush=True)
    signal.sigwait(stop_signals)
    kube.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
