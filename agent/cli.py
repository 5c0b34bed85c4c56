"""The `moonin-agent` command line.

Every error a user can cause (bad configuration, a missing queue directory) is one line on
stderr and exit code 2; scripts parse stdout, whose shapes are fixed by the design.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from agent import exits
from runtime.version import VERSION
from shipper.records import STREAMS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moonin-agent",
        description="In-cluster agent for Moonin: discovery records and scheduled HPA scaling.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("version", help="print the agent version")

    commands.add_parser(
        "demo",
        help="run both roles against a fake cluster and a fake Moonin platform for under "
        "half a minute (an outage and its replay, a scaling window applied and reverted) "
        "and print what happened; needs the sandbox extra",
    )

    run = commands.add_parser("run", help="run the agent (configured by the environment)")
    run.add_argument("--role", required=True, choices=["discovery", "scaling", "all"])
    run.add_argument("--config", help="config.yaml path (default: $CONFIG_FILE)")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="scaling: log each HPA and Deployment change and send it as a server-side dry "
        "run (validated, never stored), and queue no event (discovery only reads anyway)",
    )
    _cluster_arguments(run)

    preview = commands.add_parser(
        "preview",
        help="list the cluster once and print every record the agent would send "
        "(JSON lines; nothing is sent or queued, no credentials needed)",
    )
    preview.add_argument("--config", help="config.yaml path (default: $CONFIG_FILE)")
    _cluster_arguments(preview)

    queue = commands.add_parser("queue", help="inspect a queue directory (read-only)")
    queue_commands = queue.add_subparsers(dest="queue_command", required=True, metavar="VIEW")
    for name, help_text in (
        ("stats", "records, bytes, age, dead letters and drops per stream (one JSON object)"),
        ("peek", "queued records, oldest first, exactly as they will be sent (JSON lines)"),
        ("dead-letters", "records the platform refused, with its answer (JSON lines)"),
    ):
        view = queue_commands.add_parser(name, help=help_text)
        view.add_argument(
            "--queue-dir",
            default=os.environ.get("QUEUE_DIR"),
            help="the agent's queue directory (default: $QUEUE_DIR)",
        )
        view.add_argument("--stream", choices=STREAMS, help="only this stream")
        if name != "stats":
            view.add_argument("--limit", type=_positive_int, default=100, help="at most N lines")

    scaling = commands.add_parser("scaling", help="scheduled scaling")
    scaling_commands = scaling.add_subparsers(
        dest="scaling_command", required=True, metavar="ACTION"
    )
    revert_all = scaling_commands.add_parser(
        "revert-all",
        help="revert every HPA the agent manages now (reason manual) and ship the events "
        "for at most SHUTDOWN_SHIP_SECONDS; configured like `run --role scaling`",
    )
    revert_all.add_argument("--config", help="config.yaml path (default: $CONFIG_FILE)")
    revert_all.add_argument(
        "--dry-run",
        action="store_true",
        help="log each change, send it as a server-side dry run (validated, never stored) "
        "and print the report",
    )
    _cluster_arguments(revert_all)
    evaluate = scaling_commands.add_parser(
        "evaluate",
        help="which templates are active at an instant, and why (one JSON array; "
        "nothing is changed or sent)",
    )
    evaluate.add_argument(
        "--templates",
        required=True,
        metavar="FILE",
        help='a {"templates": [...]} document as the scaling API returns it ("-": stdin)',
    )
    evaluate.add_argument(
        "--at",
        metavar="ISO8601",
        help="the instant, with a UTC offset, e.g. 2026-12-02T08:00:00Z (default: now)",
    )
    return parser


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    # The rule that picks the cluster, the same for every role: kube/__init__.py.
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)"
    )
    parser.add_argument(
        "--context", help="kubeconfig context, chosen even in a pod (default: its current one)"
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(VERSION)
        return 0
    if args.command == "queue":
        return _queue(args)
    if args.command == "preview":
        return _preview(args)
    if args.command == "scaling":
        return _scaling(args)
    if args.command == "demo":
        return _demo()
    return _run(args)


def _fail(message: str) -> int:
    return exits.Failure(message, exits.CANNOT_START).report()


def _run(args: argparse.Namespace) -> int:
    from agent import config, run

    try:
        settings = config.load_settings(args.role, os.environ, config_file=args.config)
    except config.ConfigError as exc:
        return _fail(str(exc))
    return run.run(settings, kubeconfig=args.kubeconfig, context=args.context, dry_run=args.dry_run)


def _preview(args: argparse.Namespace) -> int:
    from agent import config, heap, preview

    try:
        settings = config.load_collection_settings(os.environ, config_file=args.config)
    except config.ConfigError as exc:
        return _fail(str(exc))
    heap.tune()  # it decodes a whole cluster in bulk, as a warm-up does
    return preview.preview(settings, kubeconfig=args.kubeconfig, context=args.context)


def _demo() -> int:
    from agent import demo

    return demo.main()


def _scaling(args: argparse.Namespace) -> int:
    if args.scaling_command == "revert-all":
        return _revert_all(args)
    from scheduler import evaluate

    try:
        now = evaluate.parse_at(args.at)
        payload = evaluate.read_payload(args.templates)
        verdicts = evaluate.evaluate_payload(payload, now, source=args.templates)
    except evaluate.EvaluateError as exc:
        return _fail(str(exc))
    out = sys.stdout.buffer
    out.write(evaluate.render(verdicts))
    out.flush()
    return 0


def _revert_all(args: argparse.Namespace) -> int:
    from agent import config, scaling

    try:
        settings = config.load_settings("scaling", os.environ, config_file=args.config)
    except config.ConfigError as exc:
        return _fail(str(exc))
    return scaling.revert_all_now(
        settings, kubeconfig=args.kubeconfig, context=args.context, dry_run=args.dry_run
    )


def _queue(args: argparse.Namespace) -> int:
    from agent import queue_inspect

    if not args.queue_dir:
        return _fail("--queue-dir is required (or set QUEUE_DIR)")
    queue_dir = Path(args.queue_dir)
    try:
        if args.queue_command == "stats":
            stats = queue_inspect.stats(queue_dir, args.stream)
            _write_lines([msgspec.json.encode(stats)])
        elif args.queue_command == "peek":
            _write_lines(queue_inspect.peek(queue_dir, args.stream, args.limit))
        else:
            _write_lines(queue_inspect.dead_letters(queue_dir, args.stream, args.limit))
    except queue_inspect.InspectError as exc:
        return _fail(str(exc))
    return 0


def _write_lines(lines: Iterable[bytes]) -> None:
    out = sys.stdout.buffer
    for line in lines:
        out.write(line + b"\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main())
