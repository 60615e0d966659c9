"""``python -m stateful serve``: run the embedded reference stack until SIGINT/SIGTERM;
``python -m stateful clauses``: list the contract's clauses;
``python -m stateful replay DIR|FILE...``: run repros, say which are fixed (``stateful.replay``);
``python -m stateful campaign``: a time-boxed search for every distinct bug (``stateful.campaign``);
``python -m stateful bench``: the benchmarks (``stateful.bench``, its own options).

Installed (``pip install agent-terminal-conformance``), the same commands are the console scripts
``agent-terminal-conformance`` and ``stateful`` (:func:`console`).

Prints exactly one JSON line on stdout once both servers answer::

    {"server_url": "...", "mock_llm_url": "...", "runner_id": "..."}

so a script can start it and read where to point a client. On SIGINT/SIGTERM every terminal is closed
and the process exits 0. Bad options give a clear error and exit status 2. The bearer token may come
from ``STATEFUL_SERVER_TOKEN`` instead of ``--token``: a command line shows in the process list.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Sequence

import httpx

from stateful.arguments import milliseconds, port, positive_int

EXIT_USAGE = 2
PASSED_THROUGH = ("bench",)
"""Sub-commands whose module parses its own arguments (``stateful.bench``): everything after the
name is theirs."""


def build_parser(prog: str = "python -m stateful") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="a property-based, stateful tester of the terminal tools of agent servers")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the embedded reference stack (sessions API + mock LLM)")
    serve.add_argument("--host", default="127.0.0.1", help="sessions API address (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=0, help="sessions API port (default 0: a free port)")
    serve.add_argument("--mock-port", type=port, default=0, help="mock LLM port, always on 127.0.0.1 (default 0)")
    serve.add_argument(
        "--max-model-calls", type=positive_int, default=200,
        help="model calls a turn may make before it is cut off (default 200)",
    )
    serve.add_argument("--latency", type=milliseconds, default=0.0, metavar="MS",
                       help="milliseconds added to every response of the sessions API (a slow server; default 0)")
    serve.add_argument(
        "--token",
        default=os.environ.get("STATEFUL_SERVER_TOKEN") or None,
        help="bearer token the sessions API requires (required off loopback); better given as the environment "
             "variable STATEFUL_SERVER_TOKEN, which the process list does not show",
    )
    clauses = commands.add_parser("clauses", help="list the contract's clauses that violations name")
    clauses.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    from stateful import replay
    replay.build_parser(commands.add_parser("replay", help="run repros (either kind): FIXED / STILL FAILING / SKIPPED / ERROR"))
    from stateful.campaign.options import add_parser as add_campaign

    add_campaign(commands)
    commands.add_parser("bench", add_help=False, help="the benchmarks (docs/benchmarks.md; bench --help: its options)")
    return parser


def tmux_needed(args: argparse.Namespace) -> bool:
    """Whether the command runs terminals on this machine: the embedded stack or the direct target.
    Against an external server (``--server-url``) the terminals are the server's."""
    if args.command in ("serve", "bench"):
        return True
    if args.command in ("campaign", "replay"):
        return not getattr(args, "server_url", None)
    return False


def tmux_missing(command: str) -> str | None:
    """One line saying that ``command`` needs tmux, when there is no ``tmux`` on PATH."""
    if shutil.which("tmux"):
        return None
    return f"error: tmux is not installed (no 'tmux' on PATH); '{command}' runs terminals in it: install tmux first"


def list_clauses(args: argparse.Namespace) -> int:
    """Every clause id with its section and rule: the names violations, repros and reports use."""
    from stateful.clauses import CLAUSES

    lines = [json.dumps({"id": c.id, "section": c.section, "rule": c.rule, "exception": c.violation.__name__,
                                    "goes_on": bool(c.goes_on), "goes_on_how": c.goes_on})
             if args.json else f"{c.id:<26} {c.section:<10} {c.rule}" for c in CLAUSES.values()]
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _wait_until_answering(urls: Sequence[str], token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for url in urls:
        reply = httpx.get(f"{url}/health", headers=headers, timeout=10.0)
        reply.raise_for_status()


def serve(args: argparse.Namespace) -> int:
    from stateful.reference.agent import LoopSettings
    from stateful.reference.stack import EmbeddedStack, is_loopback

    if not is_loopback(args.host) and not args.token:
        print(f"error: --host {args.host} is not loopback: a token is required (STATEFUL_SERVER_TOKEN or --token)",
              file=sys.stderr)
        return EXIT_USAGE
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stack = EmbeddedStack(
            host=args.host, port=args.port, mock_port=args.mock_port, token=args.token,
            settings=LoopSettings(max_model_calls=args.max_model_calls), latency=args.latency,
        )
        stack.start()
    except OSError as exc:
        print(f"error: cannot bind: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        _wait_until_answering([stack.server_url, stack.mock_llm_url], args.token)
        line = {"server_url": stack.server_url, "mock_llm_url": stack.mock_llm_url, "runner_id": stack.runner_id}
        print(json.dumps(line), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        stack.close()
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m stateful") -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in PASSED_THROUGH:
        args = argparse.Namespace(command=arguments[0])
    else:
        args = build_parser(prog).parse_args(arguments)
    problem = tmux_missing(args.command) if tmux_needed(args) else None
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    if args.command == "bench":
        from stateful.bench import main as bench

        return bench(arguments[1:])
    if args.command == "serve":
        return serve(args)
    if args.command == "clauses":
        return list_clauses(args)
    if args.command == "replay":
        from stateful.replay import replay as run_replay
        return run_replay(args)
    if args.command == "campaign":
        from stateful.campaign.driver import run as campaign

        return campaign(args)
    return EXIT_USAGE  # pragma: no cover - argparse rejects unknown commands


def console() -> None:
    """The installed commands (``agent-terminal-conformance``, ``stateful``): ``main`` under the name
    they were invoked by."""
    sys.exit(main(prog=os.path.basename(sys.argv[0]) or "stateful"))


if __name__ == "__main__":
    sys.exit(main())
