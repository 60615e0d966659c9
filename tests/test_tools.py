"""The five sys_terminal_* tools: every clause and error string of CONTRACT §1, exactly."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stateful.reference import tmux
from stateful.reference.registry import ResourceEvent, TerminalRegistry
from stateful.reference.spec import TerminalSpec
from stateful.reference.tmux import TmuxTimeout
from stateful.reference.tools import TOOL_SCHEMAS, TOOLS, ToolContext, call_tool
from stateful.targets.probe import Probe

Call = Callable[..., Any]
Eventually = Callable[..., Any]

PAIR_TOOLS = ["sys_terminal_launch", "sys_terminal_send", "sys_terminal_read", "sys_terminal_close"]
ALL_TOOLS = [*PAIR_TOOLS, "sys_terminal_list"]
OBJECT_ERROR = {"error": "arguments must be a JSON object"}
MALFORMED = {"error": "malformed JSON arguments"}
TERMINAL_ERROR = {"error": "requires a non-empty 'terminal' string"}
SESSION_ERROR = {"error": "requires a non-empty 'session' string"}


def not_found(terminal: str, session: str) -> dict[str, str]:
    return {"error": f"terminal '{terminal}:{session}' not found or not running"}


def pair(session: str = "s", terminal: str = "bash", **extra: Any) -> dict[str, Any]:
    return {"terminal": terminal, "session": session, **extra}


def read_until(call: Call, needle: str, eventually: Eventually, session: str = "s", **kw: Any) -> str:
    def check() -> str | None:
        screen = call("sys_terminal_read", pair(session, scrollback=2000), **kw)["screen"]
        return screen if needle in screen else None

    return eventually(check)


# --------------------------------------------------------------------------------------------
# common argument errors, in the contract's order


@pytest.mark.parametrize("tool", ALL_TOOLS)
@pytest.mark.parametrize("arguments", ["[]", "null", "5", '"text"', "true", '[{"terminal": "bash"}]'])
def test_arguments_that_are_not_an_object(call: Call, tool: str, arguments: str) -> None:
    assert call(tool, arguments) == OBJECT_ERROR


@pytest.mark.parametrize("tool", ALL_TOOLS)
@pytest.mark.parametrize("arguments", ["", "   ", "{", "{'terminal': 'bash'}", "nope", '{"a": 1}x', "[" * 100_000])
def test_empty_or_unparsable_arguments(call: Call, tool: str, arguments: str) -> None:
    assert call(tool, arguments) == MALFORMED


@pytest.mark.parametrize("tool", PAIR_TOOLS)
@pytest.mark.parametrize(
    "arguments",
    [{}, {"session": "s"}, {"terminal": None, "session": "s"}, {"terminal": "", "session": "s"},
     {"terminal": 5, "session": "s"}, {"terminal": ["bash"], "session": "s"}, {"terminal": ""},
     {"terminal": True, "session": ""}],
)  # fmt: skip
def test_terminal_is_checked_before_session(call: Call, tool: str, arguments: dict[str, Any]) -> None:
    assert call(tool, arguments) == TERMINAL_ERROR


@pytest.mark.parametrize("tool", PAIR_TOOLS)
@pytest.mark.parametrize(
    "arguments",
    [{"terminal": "bash"}, {"terminal": "bash", "session": None}, {"terminal": "bash", "session": ""},
     {"terminal": "bash", "session": 1}, {"terminal": "nope", "session": {}}],
)  # fmt: skip
def test_session_must_be_a_non_empty_string(call: Call, tool: str, arguments: dict[str, Any]) -> None:
    assert call(tool, arguments) == SESSION_ERROR


def test_list_ignores_its_arguments_but_not_their_form(call: Call) -> None:
    assert call("sys_terminal_list", {}) == []
    assert call("sys_terminal_list", {"terminal": 5, "session": "", "anything": [1]}) == []
    assert call("sys_terminal_list", "[]") == OBJECT_ERROR


def test_unknown_tool(call: Call) -> None:
    assert call("sys_terminal_nope", {}) == {"error": "unknown tool 'sys_terminal_nope'"}


def test_results_are_json_strings(call: Call) -> None:
    for tool in ALL_TOOLS:
        assert isinstance(call(tool, "[]", raw=True), str)


# --------------------------------------------------------------------------------------------
# launch


def test_launch_launched_then_already_running(
    call: Call, terminal_events: list[ResourceEvent], tool_context: ToolContext
) -> None:
    first = call("sys_terminal_launch", pair())
    assert first == {
        "terminal": "bash",
        "session": "s",
        "tmux_socket": first["tmux_socket"],
        "has_os_env": True,
        "status": "launched",
    }
    assert list(first) == ["terminal", "session", "tmux_socket", "has_os_env", "status"]
    assert os.path.exists(first["tmux_socket"])
    assert call("sys_terminal_launch", pair()) == {**first, "status": "already_running"}
    assert [(e.session_id, e.event_type, e.resource_id) for e in terminal_events] == [
        (tool_context.session_id, "session.resource.created", "terminal_bash_s")
    ]


def test_launch_of_an_undeclared_terminal(call: Call, tool_context: ToolContext, bash_spec: TerminalSpec) -> None:
    context = replace(tool_context, terminals={"zsh": bash_spec, "bash": bash_spec, "fish": bash_spec})
    assert call("sys_terminal_launch", pair(terminal="x"), context=context) == {
        "error": "unknown terminal 'x'; declared: ['bash', 'fish', 'zsh']"
    }
    assert call("sys_terminal_launch", pair(terminal="it's"), context=replace(context, terminals={})) == {
        "error": "unknown terminal \"it's\"; declared: []"
    }


def test_launch_of_a_program_that_dies_at_once(call: Call, tool_context: ToolContext, tmp_path: Path) -> None:
    context = replace(tool_context, terminals={"t": TerminalSpec("t", "true", cwd=str(tmp_path))})
    assert call("sys_terminal_launch", pair("k 1", terminal="t"), context=context) == {
        "error": "launch failed: terminal t:k 1 exited before it became available"
    }
    assert call("sys_terminal_list", {}, context=context) == []


def test_overrides_are_refused_unless_the_spec_allows_them(call: Call) -> None:
    assert call("sys_terminal_launch", pair(cwd="sub")) == {
        "error": "cwd override is not allowed for terminal 'bash' "
        "(set allow_cwd_override: true on the terminal spec to permit)"
    }
    assert call("sys_terminal_launch", pair(cwd="")) == call("sys_terminal_launch", pair(cwd="sub"))
    assert call("sys_terminal_launch", pair(sandbox="none")) == {
        "error": "sandbox override is not allowed for terminal 'bash' "
        "(set allow_sandbox_override: true on the terminal spec to permit)"
    }
    assert call("sys_terminal_launch", pair(cwd=None, sandbox=None))["status"] == "launched"


@pytest.fixture
def permissive(tool_context: ToolContext, bash_spec: TerminalSpec) -> ToolContext:
    spec = replace(bash_spec, allow_cwd_override=True, allow_sandbox_override=True)
    return replace(tool_context, terminals={"bash": spec})


def test_an_allowed_cwd_must_stay_inside_the_spec_cwd(
    call: Call, permissive: ToolContext, tmp_path: Path, eventually: Eventually
) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "link").symlink_to("/")
    root = os.path.realpath(tmp_path)
    for cwd in ["..", "/", "sub/../..", "link", "/tmp"]:
        resolved = os.path.realpath(os.path.join(root, cwd))
        assert call("sys_terminal_launch", pair(cwd=cwd), context=permissive) == {
            "error": f"launch failed: cwd override {cwd!r} resolves to {resolved} which is outside "
            f"the allowed root {root}. A terminal cwd override must point at the spec's cwd or a "
            "subdirectory of it; pointing elsewhere would escape the sandbox's filesystem and "
            "dotfile-masking anchors."
        }
    assert call("sys_terminal_launch", pair(cwd="missing"), context=permissive) == {
        "error": "launch failed: cwd override 'missing' is not a directory"
    }
    assert call("sys_terminal_launch", pair(cwd=7), context=permissive) == {
        "error": "'cwd' must be a string if provided"
    }
    assert call("sys_terminal_launch", pair("a", cwd="sub/deeper"), context=permissive)["status"] == "launched"
    assert call("sys_terminal_launch", pair("b", cwd=f"{root}/sub"), context=permissive)["status"] == "launched"
    assert call("sys_terminal_launch", pair("c", cwd="."), context=permissive)["status"] == "launched"
    for session, path in [("a", f"{root}/sub/deeper"), ("b", f"{root}/sub"), ("c", root)]:
        call("sys_terminal_send", pair(session, text="pwd | md5sum"), context=permissive)
        digest = hashlib.md5(f"{path}\n".encode()).hexdigest()
        read_until(call, digest, eventually, session, context=permissive)


def test_an_allowed_sandbox_override(call: Call, permissive: ToolContext) -> None:
    assert call("sys_terminal_launch", pair(sandbox="bwrap"), context=permissive) == {
        "error": "invalid sandbox override 'bwrap'; must be 'none' or 'linux_bwrap'"
    }
    assert call("sys_terminal_launch", pair(sandbox="linux_bwrap"), context=permissive) == {
        "error": "launch failed: sandbox 'linux_bwrap' is not available in the reference stack "
        "(it runs terminals without a sandbox); use 'none'"
    }
    assert call("sys_terminal_launch", pair(sandbox="none"), context=permissive)["status"] == "launched"


def test_extra_keys_change_nothing(call: Call, eventually: Eventually) -> None:
    extra = {"cmd": "rm -rf /", "command": "zsh", "scrollback": "x", "timeout": -1, "Terminal": "zsh"}
    launched = call("sys_terminal_launch", pair(**extra))
    assert launched["status"] == "launched"
    assert call("sys_terminal_send", pair(text="echo EX$((1+1))TRA", **extra)) == {"status": "sent"}
    read_until(call, "EX2TRA\n", eventually)
    assert call("sys_terminal_read", pair(**{**extra, "scrollback": 3, "text": "x"}))["scrollback_lines"] == 3
    [row] = call("sys_terminal_list", extra)
    assert row["command"] == "bash --norc --noprofile"
    assert call("sys_terminal_close", pair(**extra)) == {"terminal": "bash", "session": "s", "status": "closed"}


# --------------------------------------------------------------------------------------------
# send


def test_send_checks_in_order(call: Call) -> None:
    bad = {"text": 5, "keys": None}
    assert call("sys_terminal_send", pair(**bad)) == not_found("bash", "s")  # not registered first
    call("sys_terminal_launch", pair())
    for text in [5, 1.5, True, [], {}, ["a"]]:
        assert call("sys_terminal_send", pair(text=text, keys=None)) == {
            "error": "'text' must be a string if provided"
        }
    for keys in [None, 5, False, ["Enter"], {}]:
        assert call("sys_terminal_send", pair(text="x", keys=keys)) == {
            "error": "'keys' must be a string if provided"
        }


def test_send_defaults_to_enter_and_empty_keys_press_nothing(call: Call, eventually: Eventually) -> None:
    call("sys_terminal_launch", pair())
    assert call("sys_terminal_send", pair(text="echo DEF$((1+1))AULT")) == {"status": "sent"}
    read_until(call, "DEF2AULT\n", eventually)
    assert call("sys_terminal_send", pair(text="echo NO$((1+1))KEYS", keys="")) == {"status": "sent"}
    assert call("sys_terminal_send", pair(text=None, keys="")) == {"status": "sent"}
    assert call("sys_terminal_send", pair()) == {"status": "sent"}  # no text: presses Enter
    screen = read_until(call, "NO2KEYS\n", eventually)
    assert screen.count("echo NO$((1+1))KEYS") == 1  # typed once, run once


@pytest.mark.parametrize(
    "text",
    ["-e x", "ends;", "ends\\;", "Enter", "C-c", "#{pane_id}#(id)", "q'u\"o`t$e", "多字节 🎉", "a\nb", "x" * 20_000],
)
def test_send_is_literal(call: Call, eventually: Eventually, text: str) -> None:
    call("sys_terminal_launch", pair())
    quoted = "'" + text.replace("'", "'\\''") + "'"
    call("sys_terminal_send", pair(text=f"printf %s {quoted} | md5sum"))
    read_until(call, hashlib.md5(text.encode()).hexdigest() + "  -", eventually)


# --------------------------------------------------------------------------------------------
# read


def test_read_shape_and_scrollback_validation(call: Call) -> None:
    assert call("sys_terminal_read", pair(scrollback=-1)) == not_found("bash", "s")
    call("sys_terminal_launch", pair("k:1"))
    for scrollback in [-1, 1.5, 2.0, "5", None, True, False, [3]]:
        assert call("sys_terminal_read", pair("k:1", scrollback=scrollback)) == {
            "error": "'scrollback' must be a non-negative integer"
        }
    result = call("sys_terminal_read", pair("k:1"))
    assert list(result) == ["terminal", "screen", "scrollback_lines"]
    assert result["terminal"] == "bash:k:1" and result["scrollback_lines"] == 0
    rows = result["screen"].split("\n")
    assert rows[-1] == "" and len(rows) == 25  # 24 rows, each ending in a newline
    assert "\x1b" not in result["screen"]
    assert call("sys_terminal_read", pair("k:1", scrollback=10**9))["scrollback_lines"] == 10**9


def test_read_is_plain_text_with_history_above_the_screen(call: Call, eventually: Eventually) -> None:
    call("sys_terminal_launch", pair())
    call("sys_terminal_send", pair(text="echo FIR$((1+1))ST; printf '\\e[31mred\\e[0m\\n'; seq 1 60"))
    read_until(call, "\n60\n", eventually)
    assert "FIR2ST" not in call("sys_terminal_read", pair())["screen"]
    full = call("sys_terminal_read", pair(scrollback=100))["screen"]
    assert "FIR2ST\nred\n1\n2\n" in full and "\x1b" not in full


# --------------------------------------------------------------------------------------------
# list and close


def test_list_in_launch_order_with_its_fields(call: Call, tool_context: ToolContext) -> None:
    sockets = {s: call("sys_terminal_launch", pair(s))["tmux_socket"] for s in ("b", "a", "c")}
    rows = call("sys_terminal_list", {})
    assert rows == [
        {"terminal": "bash", "session": s, "command": "bash --norc --noprofile", "running": True,
         "has_os_env": True, "tmux_socket": sockets[s]}
        for s in ("b", "a", "c")
    ]  # fmt: skip
    assert all(list(r) == ["terminal", "session", "command", "running", "has_os_env", "tmux_socket"] for r in rows)
    assert call("sys_terminal_close", pair("b"))["status"] == "closed"
    call("sys_terminal_launch", pair("b"))
    assert [r["session"] for r in call("sys_terminal_list", {})] == ["a", "c", "b"]


def test_close_closed_then_not_found(call: Call, terminal_events: list[ResourceEvent], terminal_pids: Callable[[str], list[int]]) -> None:
    socket = call("sys_terminal_launch", pair("x y"))["tmux_socket"]
    assert call("sys_terminal_close", pair("x y")) == {"terminal": "bash", "session": "x y", "status": "closed"}
    assert terminal_pids(socket) == [] and not os.path.exists(os.path.dirname(socket))
    assert call("sys_terminal_close", pair("x y")) == {"terminal": "bash", "session": "x y", "status": "not_found"}
    assert call("sys_terminal_close", pair("never")) == {"terminal": "bash", "session": "never", "status": "not_found"}
    assert call("sys_terminal_send", pair("x y", text="x")) == not_found("bash", "x y")
    assert call("sys_terminal_read", pair("x y")) == not_found("bash", "x y")
    assert call("sys_terminal_list", {}) == []
    assert [e.event_type for e in terminal_events] == ["session.resource.created", "session.resource.deleted"]


def test_an_exited_terminal_disappears_and_relaunches(call: Call, eventually: Eventually) -> None:
    first = call("sys_terminal_launch", pair())
    call("sys_terminal_send", pair(text="exit"))
    eventually(lambda: call("sys_terminal_list", {}) == [])
    assert call("sys_terminal_send", pair(text="x")) in (
        not_found("bash", "s"),
        {"error": "Terminal bash:s is no longer running (tmux server exited)"},
    )
    again = call("sys_terminal_launch", pair())
    assert again["status"] == "launched" and again["tmux_socket"] != first["tmux_socket"]


# --------------------------------------------------------------------------------------------
# scoping: agent sessions and undeclared terminals


def test_an_agent_session_never_reaches_another_ones_terminals(
    call: Call, tool_context: ToolContext, eventually: Eventually
) -> None:
    other = replace(tool_context, session_id="agent-session-2")
    socket = call("sys_terminal_launch", pair())["tmux_socket"]
    assert call("sys_terminal_list", {}, context=other) == []
    assert call("sys_terminal_send", pair(text="exit"), context=other) == not_found("bash", "s")
    assert call("sys_terminal_read", pair(), context=other) == not_found("bash", "s")
    assert call("sys_terminal_close", pair(), context=other)["status"] == "not_found"
    theirs = call("sys_terminal_launch", pair(), context=other)
    assert theirs["status"] == "launched" and theirs["tmux_socket"] != socket
    call("sys_terminal_send", pair(text="echo MI$((1+1))NE"))
    read_until(call, "MI2NE\n", eventually)
    assert "MI2NE" not in call("sys_terminal_read", pair(scrollback=100), context=other)["screen"]
    assert [r["tmux_socket"] for r in call("sys_terminal_list", {})] == [socket]


def test_a_server_owned_undeclared_terminal_is_not_addressable(
    call: Call, tool_context: ToolContext, terminal_registry: TerminalRegistry, bash_spec: TerminalSpec
) -> None:
    tui = replace(bash_spec, name="tui")
    socket = terminal_registry.launch(tool_context.session_id, tui, "main").tmux_socket
    assert call("sys_terminal_launch", pair("main", terminal="tui")) == {
        "error": "unknown terminal 'tui'; declared: ['bash']"
    }
    assert call("sys_terminal_send", pair("main", terminal="tui", text="exit")) == not_found("tui", "main")
    assert call("sys_terminal_read", pair("main", terminal="tui")) == not_found("tui", "main")
    assert call("sys_terminal_close", pair("main", terminal="tui")) == {
        "terminal": "tui", "session": "main", "status": "not_found",
    }  # fmt: skip
    [row] = call("sys_terminal_list", {})  # the server may list what it runs itself
    assert (row["terminal"], row["session"], row["running"], row["tmux_socket"]) == ("tui", "main", True, socket)


# --------------------------------------------------------------------------------------------
# concurrency through the tools


def test_concurrent_tool_calls_of_one_reply(call: Call, terminal_events: list[ResourceEvent]) -> None:
    import threading

    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(6)

    def launch() -> None:
        barrier.wait()
        results.append(call("sys_terminal_launch", pair()))

    threads = [threading.Thread(target=launch) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r["status"] for r in results) == ["already_running"] * 5 + ["launched"]
    assert len({r["tmux_socket"] for r in results}) == 1
    assert len(terminal_events) == 1


# --------------------------------------------------------------------------------------------
# schemas


def test_tool_schemas_describe_the_five_tools() -> None:
    assert [s["name"] for s in TOOL_SCHEMAS] == list(TOOLS)
    assert sorted(TOOLS) == sorted(ALL_TOOLS)
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function" and schema["description"]
        assert schema["parameters"]["type"] == "object"
        json.dumps(schema)
    required = {s["name"]: s["parameters"].get("required", []) for s in TOOL_SCHEMAS}
    assert required == {**{t: ["terminal", "session"] for t in PAIR_TOOLS}, "sys_terminal_list": []}
    assert call_tool.__name__ == "call_tool"


def test_odd_values_give_results_never_exceptions(call: Call, eventually: Eventually) -> None:
    assert call("sys_terminal_launch", pair("\udc80 \0 ;"))["status"] == "launched"
    odd = pair("\udc80 \0 ;")
    assert call("sys_terminal_send", {**odd, "text": "echo O\0K\udc80", "keys": "C-u"}) == {"status": "sent"}
    assert call("sys_terminal_send", {**odd, "text": "", "keys": "a\0b " + "Enter " * 5000 + "C-u"}) == {"status": "sent"}
    assert call("sys_terminal_send", {**odd, "text": "echo BIG$((1+1))", "keys": "Enter"}) == {"status": "sent"}
    read = call("sys_terminal_read", {**odd, "scrollback": 10**30})
    assert read["scrollback_lines"] == 10**30
    read_until(call, "BIG2\n", eventually, "\udc80 \0 ;")
    assert [r["session"] for r in call("sys_terminal_list", {})] == ["\udc80 \0 ;"]
    assert call("sys_terminal_close", odd)["status"] == "closed"


def test_a_cwd_with_nul_is_refused(call: Call, permissive: ToolContext) -> None:
    assert call("sys_terminal_launch", pair(cwd="a\0b"), context=permissive) == {
        "error": "launch failed: cwd override 'a\\x00b' is not a directory"
    }


def test_override_refusals_come_in_omnigents_order(call: Call, tool_context: ToolContext, bash_spec: TerminalSpec) -> None:
    only_cwd = replace(tool_context, terminals={"bash": replace(bash_spec, allow_cwd_override=True)})
    assert call("sys_terminal_launch", pair(cwd="/", sandbox="none"), context=only_cwd)["error"].startswith(
        "sandbox override is not allowed"
    )
    assert call("sys_terminal_launch", pair(cwd=5, sandbox="none"))["error"].startswith("cwd override is not allowed")
    both = replace(tool_context, terminals={"bash": replace(bash_spec, allow_cwd_override=True, allow_sandbox_override=True)})
    assert call("sys_terminal_launch", pair(cwd="/", sandbox="nope"), context=both)["error"].startswith(
        "invalid sandbox override 'nope'"
    )
    assert call("sys_terminal_launch", pair(cwd=5, sandbox="none"), context=both) == {
        "error": "'cwd' must be a string if provided"
    }


def test_a_hung_tmux_server_gives_an_error_and_frees_the_pair(
    call: Call, eventually: Eventually, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = call("sys_terminal_launch", pair())["tmux_socket"]
    server = Probe().view(socket).server
    assert server is not None
    monkeypatch.setattr(tmux, "TMUX_TIMEOUT", 1.0)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        hung = f"tmux capture-pane did not answer within 1 s: the tmux server at {socket} hangs"
        for _ in range(2):  # the second call is not held by the first one's lock on the pair
            started = time.monotonic()
            assert call("sys_terminal_read", pair())["error"].startswith(f"read failed: {hung}")
            assert time.monotonic() - started < 10
        with pytest.raises(TmuxTimeout, match="tmux list-panes did not answer within 1 s"):
            Probe().view(socket)
        assert Probe().capture(socket).startswith("<capture failed: tmux capture-pane did not answer")
    finally:
        os.kill(server.pid, signal.SIGCONT)
    call("sys_terminal_send", pair(text="echo back-$((40+2))"))
    read_until(call, "back-42", eventually)
