"""Hand probe (docs/omnigent.md, issue 23, finding 7): does an exited pair stay listed when another live
pair of its session shares its resource id (finding 3: omnigent never makes ids unique)?

omnigent's exit watcher hands an exit to ``ResourceRegistry._handle_terminal_exit``, which looks the
terminal up by its *resource id* (``_terminal_lifecycles.pop((session, terminal_id))``) and does
nothing when that entry is gone. Two live pairs that share an id share that entry: the first to exit
takes it, so the second, when it exits, would never be evicted (still listed) and would record no
``deleted`` event. Each case below runs in a fresh agent session: launch the pairs, list, type
``exit`` into (or close) the ones named, a turn each, then list again after ``SETTLE`` seconds (far beyond the contract's 2 s,
so how slow the box is does not decide the answer) and read the session's resource events.

Run with this project's venv against a running omnigent (docs/omnigent.md, "Starting omnigent"):

    .venv/bin/python docs/probes/omnigent_exit_siblings.py SERVER_URL MOCK_LLM_URL RUNNER_ID
"""

from __future__ import annotations

import json
import sys
import time

from stateful.model import Call
from stateful.targets.base import Server
from stateful.targets.sessions import SessionsTarget

SETTLE = 12.0
"""Seconds from the end of the ``exit`` turn to the list that judges (the contract allows 2)."""

CASES: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    # name: (the sessions of the sh pairs launched in order, then each action's turn: (tool, session);
    # tool "exit" sends `exit`)
    "one pair, exited (control)": (["solo"], [("exit", "solo")]),
    "two pairs, distinct ids, both exited (control)": (["p1", "p2"], [("exit", "p1"), ("exit", "p2")]),
    "siblings 'a b' and 'a_b', both exited": (["a b", "a_b"], [("exit", "a b"), ("exit", "a_b")]),
    "siblings, only the first exited": (["c d", "c_d"], [("exit", "c d")]),
    "siblings, only the second exited": (["e f", "e_f"], [("exit", "e_f")]),
    "siblings, the first closed, then the second exited": (["g h", "g_h"], [("close", "g h"), ("exit", "g_h")]),
    "siblings, the first exited, then closed in the next turn": (["i j", "i_j"], [("exit", "i j"), ("close", "i j")]),
    "one pair exited, launched again in the next turn": (["k"], [("exit", "k"), ("launch", "k")]),
    "one pair exited, launched again, exited again": (["m"], [("exit", "m"), ("launch", "m"), ("exit", "m")]),
}


def call(tool: str, **args: str) -> Call:
    return Call(f"sys_terminal_{tool}", json.dumps(args))


def main(server_url: str, mock_llm_url: str, runner_id: str) -> None:
    with SessionsTarget.opened(Server(server_url, mock_llm_url, runner_id), 0.0) as target:
        for label, (launched, actions) in CASES.items():
            session = target.open_session()
            for name in launched:
                print("  launch", name, session.run_turn([[call("launch", terminal="sh", session=name)]],
                                                         step_timeout=60)[0][0])
            print("  list before", session.run_turn([[call("list")]], step_timeout=60)[0][0])
            for tool, name in actions:
                if tool == "exit":
                    session.run_turn([[call("send", terminal="sh", session=name, text="exit")]], step_timeout=60)
                elif tool == "launch":
                    print("  launch again", name, session.run_turn([[call("launch", terminal="sh", session=name)]],
                                                                   step_timeout=60)[0][0])
                else:
                    print("  close", name, session.run_turn([[call("close", terminal="sh", session=name)]],
                                                            step_timeout=60)[0][0])
            ended = time.monotonic()
            time.sleep(SETTLE)  # a hand probe: the list below starts SETTLE s after the last action's turn ended
            listed = json.loads(session.run_turn([[call("list")]], step_timeout=60)[0][0])
            print(f"{label}: list {time.monotonic() - ended:.1f} s after the last action:",
                  [(e["terminal"], e["session"], e["running"]) for e in listed])
            print("  events:", [(e.event_type.rsplit(".", 1)[-1], e.resource_id, e.session) for e in session.events()])
            session.delete()


if __name__ == "__main__":
    main(*sys.argv[1:4])
