"""The pure model (stateful/model.py): strict where the contract says must, tolerant where it says may."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from stateful import model as model_module
from stateful.model import (
    Call,
    ContractViolation,
    EventView,
    Ledger,
    Life,
    SessionModel,
    first_list,
    initial_model,
    judge,
    judge_step,
    reconcile_events,
    resource_base_id,
)

EMPTY = SessionModel(declared=("bash", "sh"))
ROWS = "\n" * 24


def c(tool: str, raw: str | None = None, **args: Any) -> Call:
    return Call(f"sys_terminal_{tool}", raw if raw is not None else json.dumps(args))


def out(value: Any) -> str:
    return json.dumps(value)


def launched(t: str, s: str, sock: str, status: str = "launched") -> str:
    return out({"terminal": t, "session": s, "tmux_socket": sock, "has_os_env": True, "status": status})


def entry(t: str, s: str, sock: str, running: bool = True, command: str = "bash") -> dict[str, Any]:
    return {"terminal": t, "session": s, "command": command, "running": running, "has_os_env": True, "tmux_socket": sock}


def nf(t: str, s: str) -> str:
    return out({"error": f"terminal '{t}:{s}' not found or not running"})


def with_pair(model: SessionModel = EMPTY, t: str = "bash", s: str = "a", sock: str = "/s/a") -> SessionModel:
    return judge(model, c("launch", terminal=t, session=s), launched(t, s, sock)).model


def violates(model: SessionModel, call: Call, output: str) -> None:
    with pytest.raises(ContractViolation):
        judge(model, call, output)


# --- argument errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", ["", " ", "{", '{"terminal": "bash",}'])
def test_malformed_gives_the_malformed_error_or_what_empty_object_gives(raw: str) -> None:
    assert judge(EMPTY, c("send", raw), out({"error": "malformed JSON arguments"})).label.endswith("-> error")
    j = judge(EMPTY, c("send", raw), out({"error": "requires a non-empty 'terminal' string"}))
    assert j.label == "send: malformed arguments -> as {}"
    assert judge(EMPTY, c("list", raw), out([])).label == "list: malformed arguments -> as {}"
    violates(EMPTY, c("send", raw), out({"error": "arguments must be a JSON object"}))


@pytest.mark.parametrize("raw", ["[]", "null", "1", '"x"'])
def test_non_object_arguments(raw: str) -> None:
    judge(EMPTY, c("read", raw), out({"error": "arguments must be a JSON object"}))
    violates(EMPTY, c("read", raw), out({"error": "malformed JSON arguments"}))


def test_common_errors_in_their_order() -> None:
    both_bad = c("read", terminal="", session=1)
    judge(EMPTY, both_bad, out({"error": "requires a non-empty 'terminal' string"}))
    violates(EMPTY, both_bad, out({"error": "requires a non-empty 'session' string"}))
    judge(EMPTY, c("close", terminal="bash"), out({"error": "requires a non-empty 'session' string"}))
    # list takes no terminal: other keys are ignored
    judge(EMPTY, c("list", terminal=""), out([]))


def test_extra_keys_change_nothing() -> None:
    m = with_pair()
    judge(m, c("send", terminal="bash", session="a", text="x", Terminal=5, keys="Enter"), out({"status": "sent"}))


@pytest.mark.parametrize(("error", "clause"), [
    ("unexpected argument 'Terminal'", "args.extra-keys"),  # names the extra key
    ("Additional properties are not allowed", "args.extra-keys"),  # refuses an argument
    ("tmux command failed (rc=1): unknown flag -E", "send.sent"),  # what the text caused: not the extra key
])
def test_an_error_is_blamed_on_extra_keys_only_when_it_refuses_them(error: str, clause: str) -> None:
    """The clause tells bugs apart: a send that fails because of its text fails the same without
    the extra key, so it must not be reported (and shrunk) as an extra-keys bug."""
    m = with_pair()
    with pytest.raises(ContractViolation) as failure:
        judge(m, c("send", terminal="bash", session="a", text="-E x", Terminal=5, keys="Enter"), out({"error": error}))
    assert failure.value.clause == clause


# --- launch ---------------------------------------------------------------------------------------

def test_launch_then_already_running_with_the_same_socket() -> None:
    m = with_pair()
    assert judge(m, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/a", "already_running")).label \
        == "launch: already_running"
    violates(m, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/other", "already_running"))
    violates(m, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/b"))
    violates(EMPTY, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/a", "already_running"))


def test_launch_output_is_exact() -> None:
    bad = json.loads(launched("bash", "a", "/s/a"))
    for change in ({"has_os_env": False}, {"session": "b"}, {"extra": 1}, {"tmux_socket": ""}):
        violates(EMPTY, c("launch", terminal="bash", session="a"), out({**bad, **change}))


def test_unknown_terminal_error_accepts_both_quotings() -> None:
    call = c("launch", terminal="it's", session="a")
    judge(EMPTY, call, out({"error": "unknown terminal 'it's'; declared: ['bash', 'sh']"}))
    judge(EMPTY, call, out({"error": "unknown terminal \"it's\"; declared: ['bash', 'sh']"}))
    violates(EMPTY, call, out({"error": "unknown terminal 'it's'; declared: ['sh', 'bash']"}))


def test_a_new_pair_may_not_reuse_a_live_socket() -> None:
    violates(with_pair(), c("launch", terminal="sh", session="a"), launched("sh", "a", "/s/a"))


def test_cwd_override_is_refused() -> None:
    judge(EMPTY, c("launch", terminal="bash", session="a", cwd="/tmp"), out({"error": "cwd override is not allowed"}))
    violates(EMPTY, c("launch", terminal="bash", session="a", cwd="/tmp"), launched("bash", "a", "/s/a"))


def test_concurrent_launches_start_one_process() -> None:
    call = c("launch", terminal="bash", session="a")
    ok = [launched("bash", "a", "/s/a", "already_running"), launched("bash", "a", "/s/a"),
          launched("bash", "a", "/s/a", "already_running")]
    js = judge_step(EMPTY, [call] * 3, ok)
    assert len(js[0].model.pairs) == 1
    with pytest.raises(ContractViolation, match="no sequential order"):
        judge_step(EMPTY, [call] * 2, [launched("bash", "a", "/s/a"), launched("bash", "a", "/s/b")])
    with pytest.raises(ContractViolation):
        judge_step(EMPTY, [call] * 2, [launched("bash", "a", "/s/a"), launched("bash", "a", "/s/b", "already_running")])


def test_teardown_of_ten_pairs_with_a_failing_close_is_judged_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing ten pairs in one reply, one of them answered wrongly: calls on different pairs commute,
    so each pair is judged once (a search over every order would be 10! = 3.6 million judgements)."""
    m = EMPTY
    for i in range(10):
        m = judge(m, c("launch", terminal="bash", session=f"p{i}"), launched("bash", f"p{i}", f"/s/{i}")).model
    closes = [c("close", terminal="bash", session=f"p{i}") for i in range(10)]
    outputs = [out({"terminal": "bash", "session": f"p{i}", "status": "closed"}) for i in range(10)]
    outputs[7] = out({"terminal": "bash", "session": "p7", "status": "not_found"})
    judged = []
    real_judge = model_module.judge
    monkeypatch.setattr(model_module, "judge", lambda *a: judged.append(a) or real_judge(*a))
    with pytest.raises(ContractViolation, match=r"^close\.closed: no sequential order of the 10 concurrent calls") as failure:
        judge_step(m, closes, outputs)
    assert type(failure.value).__name__ == "CloseClosedViolation"
    assert len(judged) == 8  # p0..p6 explained, p7 is not: nothing else to try
    judged.clear()
    outputs[7] = out({"terminal": "bash", "session": "p7", "status": "closed"})
    assert judge_step(m, closes, outputs)[0].model.pairs == ()
    assert len(judged) == 10


def test_concurrent_list_may_see_a_launch_or_not() -> None:
    launch = c("launch", terminal="bash", session="a")
    for listing in ([], [entry("bash", "a", "/s/a")]):
        judge_step(EMPTY, [c("list"), launch], [out(listing), launched("bash", "a", "/s/a")])


@pytest.mark.parametrize("listed", [["a", "b"], ["b", "a"]])
def test_concurrent_launches_of_two_pairs_register_in_either_order(listed: list[str]) -> None:
    """One reply launching two pairs: the server may register them in either order, so the next list
    may show either (a false alarm seen on the sessions target), and then that order holds."""
    calls = [c("launch", terminal="bash", session="a"), c("launch", terminal="bash", session="b")]
    m = judge_step(EMPTY, calls, [launched("bash", "a", "/s/a"), launched("bash", "b", "/s/b")])[0].model
    listing = [entry("bash", s, f"/s/{s}") for s in listed]
    m = judge(m, c("list"), out(listing)).model
    judge(m, c("list"), out(listing))
    violates(m, c("list"), out(listing[::-1]))


def test_sequential_launches_keep_their_order() -> None:
    m = with_pair(with_pair(EMPTY, s="a", sock="/s/a"), s="b", sock="/s/b")
    violates(m, c("list"), out([entry("bash", "b", "/s/b"), entry("bash", "a", "/s/a")]))


# --- send / read ----------------------------------------------------------------------------------

def test_send_statuses() -> None:
    m = with_pair()
    judge(m, c("send", terminal="bash", session="a", text="x"), out({"status": "sent"}))
    judge(EMPTY, c("send", terminal="bash", session="a", text="x"), nf("bash", "a"))
    judge(m, c("send", terminal="tui", session="a", text="x"), nf("tui", "a"))
    violates(m, c("send", terminal="bash", session="a", text="x"), nf("bash", "a"))
    violates(m, c("send", terminal="bash", session="a", text="x"),
             out({"error": "Terminal bash:a is no longer running (tmux server exited)"}))


def test_send_unknown_key_may_error_or_be_typed() -> None:
    m = with_pair()
    judge(m, c("send", terminal="bash", session="a", keys="NoSuchKey"), out({"error": "unknown key: NoSuchKey"}))
    judge(m, c("send", terminal="bash", session="a", keys="NoSuchKey"), out({"status": "sent"}))
    violates(m, c("send", terminal="bash", session="a", keys="Enter"), out({"error": "unknown key"}))


def test_send_type_errors_in_any_order_with_not_found() -> None:
    m = with_pair()
    both = c("send", terminal="bash", session="a", text=1, keys=None)
    judge(m, both, out({"error": "'text' must be a string if provided"}))
    judge(m, both, out({"error": "'keys' must be a string if provided"}))
    violates(m, both, out({"status": "sent"}))
    judge(m, c("send", terminal="bash", session="a", text=None), out({"status": "sent"}))
    unknown = c("send", terminal="bash", session="b", text=1)
    judge(m, unknown, nf("bash", "b"))
    judge(m, unknown, out({"error": "'text' must be a string if provided"}))


def test_exiting_pair_tolerance() -> None:
    m = with_pair()
    exiting = m._with_pair(replace(m.pairs[0], life=Life.EXITING))
    send = c("send", terminal="bash", session="a", text="")
    assert judge(exiting, send, out({"status": "sent"})).model.pairs[0].life is Life.EXITING
    gone = out({"error": "Terminal bash:a is no longer running (tmux server exited)"})
    dead = judge(exiting, send, gone).model
    assert dead.pairs[0].life is Life.DEAD
    violates(dead, send, out({"status": "sent"}))
    judge(dead, send, nf("bash", "a"))
    # list: running true/false or gone while exiting; once dead, not running
    judge(exiting, c("list"), out([entry("bash", "a", "/s/a", running=True)]))
    judge(exiting, c("list"), out([entry("bash", "a", "/s/a", running=False)]))
    after = judge(exiting, c("list"), out([])).model
    assert after.pairs == () and 0 in after.ended
    violates(dead, c("list"), out([entry("bash", "a", "/s/a", running=True)]))
    # relaunch of the exited pair
    again = judge(dead, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/new"))
    assert again.model.pairs[0].life is Life.ALIVE and 0 in again.model.ended
    violates(dead, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/a", "already_running"))
    judge(exiting, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/a", "already_running"))
    # omnigent 0.19.1 (finding 9): relaunched before it noticed the exit, already_running with a new socket
    violates(exiting, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/new", "already_running"))
    assert judge(exiting, c("launch", terminal="bash", session="a"), launched("bash", "a", "/s/new")).model.pairs[0].life \
        is Life.ALIVE


def test_read_of_an_exited_pair_may_say_it_is_no_longer_running() -> None:
    """§1 read (amended): once the process died, read gives the not-found error or send's
    no-longer-running one; a live pair's read never claims it is dead."""
    m = with_pair()
    exiting = m._with_pair(replace(m.pairs[0], life=Life.EXITING))
    read = c("read", terminal="bash", session="a")
    gone = out({"error": "Terminal bash:a is no longer running (tmux server exited)"})
    dead = judge(exiting, read, gone)
    assert dead.model.pairs[0].life is Life.DEAD and dead.label == "read: error no-longer-running after exit"
    judge(dead.model, read, gone)
    judge(dead.model, read, nf("bash", "a"))
    violates(m, read, gone)
    violates(dead.model, read, _read(ROWS))


def _read(screen: str, lines: int = 0, t: str = "bash", s: str = "a") -> str:
    return out({"terminal": f"{t}:{s}", "screen": screen, "scrollback_lines": lines})


def test_read_result_shape() -> None:
    m = with_pair()
    call = c("read", terminal="bash", session="a", scrollback=0)
    judge(m, call, _read(ROWS))
    violates(m, call, _read(ROWS + "\n"))  # more rows than scrollback 0 allows
    violates(m, call, _read("\n" * 23))
    violates(m, call, _read(ROWS[:-1] + "x"))  # last row without \\n
    violates(m, call, _read("\x1b[1m" + ROWS))
    violates(m, call, _read("x" * 81 + ROWS[1:]))
    violates(m, call, _read(ROWS, lines=5))
    judge(m, c("read", terminal="bash", session="a", scrollback=5), _read("\n" * 29, lines=5))


@pytest.mark.parametrize("bad", [-1, 1.5, 2.0, "10", True, False, None, []])
def test_read_scrollback_must_be_a_non_negative_integer(bad: Any) -> None:
    m = with_pair()
    call = c("read", terminal="bash", session="a", scrollback=bad)
    judge(m, call, out({"error": "'scrollback' must be a non-negative integer"}))
    violates(m, call, _read(ROWS, lines=1))


# --- list / close ---------------------------------------------------------------------------------

def test_list_is_baseline_plus_launched_in_launch_order() -> None:
    base = initial_model(("bash", "sh"), out([entry("tui", "main", "/s/t")]))
    m = with_pair(with_pair(base, s="z", sock="/s/z"), s="a", sock="/s/a")
    tui = entry("tui", "main", "/s/t")
    judge(m, c("list"), out([tui, entry("bash", "z", "/s/z"), entry("bash", "a", "/s/a")]))
    for wrong in ([tui, entry("bash", "a", "/s/a"), entry("bash", "z", "/s/z")],
                  [entry("bash", "z", "/s/z"), entry("bash", "a", "/s/a")],
                  [tui, entry("bash", "z", "/s/z")],
                  [tui, entry("bash", "z", "/s/z"), entry("bash", "a", "/s/other")],
                  [tui, entry("bash", "z", "/s/z"), entry("bash", "a", "/s/a", running=False)],
                  [tui, entry("bash", "z", "/s/z"), entry("bash", "a", "/s/a"), entry("sh", "x", "/s/x")]):
        violates(m, c("list"), out(wrong))
    typed = entry("bash", "z", "/s/z")
    typed["running"] = 1
    violates(m, c("list"), out([tui, typed, entry("bash", "a", "/s/a")]))


def test_list_command_stays_the_same() -> None:
    m = with_pair()
    m = judge(m, c("list"), out([entry("bash", "a", "/s/a", command="bash")])).model
    violates(m, c("list"), out([entry("bash", "a", "/s/a", command="zsh")]))


def test_close() -> None:
    m = with_pair()
    closed = judge(m, c("close", terminal="bash", session="a"),
                   out({"terminal": "bash", "session": "a", "status": "closed"})).model
    assert closed.pairs == () and closed.ended == {0}
    violates(m, c("close", terminal="bash", session="a"), out({"terminal": "bash", "session": "a", "status": "not_found"}))
    judge(closed, c("close", terminal="bash", session="a"), out({"terminal": "bash", "session": "a", "status": "not_found"}))
    judge(m, c("close", terminal="tui", session="a"), out({"terminal": "tui", "session": "a", "status": "not_found"}))


@pytest.mark.parametrize("tool, extra, answer", [
    ("send", {"text": "x"}, lambda s: {"status": "sent"}),
    ("read", {}, lambda s: {"terminal": f"tui:{s}", "screen": "\n" * 24, "scrollback_lines": 0}),
    ("close", {}, lambda s: {"terminal": "tui", "session": s, "status": "closed"}),
    ("launch", {}, lambda s: {"terminal": "tui", "session": s, "status": "already_running"}),
], ids=["send", "read", "close", "launch"])
def test_addressing_a_terminal_the_server_runs_for_itself_is_one_clause_whatever_the_tool(
        tool: str, extra: dict[str, Any], answer: Any) -> None:
    """§1: an undeclared pair is never addressable, "even if the server runs such a terminal for its
    own purposes". One bug (the server's own terminal answers) is one clause, whichever tool met it;
    an undeclared pair the server does not run keeps the tool's own clause."""
    m = initial_model(("bash",), out([entry("tui", "main", "/s/t")]))
    for session, clause in (("main", "scope.server-terminals"), ("other", f"{tool}.not-found")):
        with pytest.raises(ContractViolation) as raised:
            judge(m, c(tool, terminal="tui", session=session, **extra), out(answer(session)))
        assert raised.value.clause == (clause if tool != "launch" or session == "main" else "launch.unknown-terminal")


def test_another_sessions_pair_in_the_first_list_is_a_scope_finding_named_by_its_owner_if_known() -> None:
    """A declared pair in a fresh session's first list is one this session never launched: another
    session's terminal (§1: a session never sees another session's terminals), whether or not its
    owner is an agent session of this run (a server shared by several workers shows theirs)."""
    with pytest.raises(ContractViolation, match=r"^scope\.session: .*bash:'x'.*bash:'y' of agent 1"):
        initial_model(("bash",), out([entry("bash", "x", "/s/x")]), {"/s/x": "bash:'y' of agent 1"})
    with pytest.raises(ContractViolation, match=r"^scope\.session: .*bash:'x'.*never launched"):
        initial_model(("bash",), out([entry("bash", "x", "/s/x")]), {"/s/other": "bash:'y' of agent 1"})


def test_a_known_scope_finding_leaves_other_sessions_rows_out_of_the_first_list_and_the_baseline() -> None:
    judged = first_list(("bash",), out([entry("tui", "main", "/s/t"), entry("bash", "x", "/s/x"),
                                        entry("tui", "main", "/s/t2")]), tolerated={"scope.session"})
    assert judged.model.baseline == (("tui", "main"),)
    assert [clause for clause, _ in judged.noted] == ["scope.session", "scope.session"]


def test_a_known_scope_finding_leaves_other_sessions_rows_out_of_every_list_even_of_the_same_names() -> None:
    """On a server whose list shows every session's terminals, another session's bash:'a' (another
    socket) sits beside this session's own: the own row is the one on its launch's socket; the
    other is noted and left out, and the rest is judged as usual (a wrong field still fails)."""
    m = replace(with_pair(initial_model(("bash",), out([entry("tui", "main", "/s/t")]))), tolerated=frozenset({"scope.session"}))
    rows = [entry("bash", "a", "/s/other-a"), entry("tui", "main", "/s/t"), entry("bash", "b", "/s/b"),
            entry("bash", "a", "/s/a"), entry("tui", "main", "/s/t2")]
    judged = judge(m, c("list"), out(rows))
    assert judged.model.pairs == m.pairs and [clause for clause, _ in judged.noted] == ["scope.session"] * 3
    violates(replace(m, tolerated=frozenset()), c("list"), out(rows))
    with pytest.raises(ContractViolation, match="^list.running"):
        judge(m, c("list"), out([*rows[:3], entry("bash", "a", "/s/a", running=False)]))
    with pytest.raises(ContractViolation, match="^list.registered: .*misses the live pair"):
        judge(m, c("list"), out(rows[1:3]))


@pytest.mark.parametrize("clause, rows", [
    ("list.unique", [entry("bash", "a", "/s/a"), entry("bash", "a", "/s/a")]),
    ("list.running", [entry("bash", "a", "/s/a", running=False)]),
])
def test_a_known_pervasive_list_bug_is_noted_and_the_model_stays_what_the_tools_said(
        clause: str, rows: list[dict[str, Any]]) -> None:
    """A server whose every list repeats a row, or lists every live pair as not running, breaks its
    clause in every program: unknown, it fails; known, it is noted, the pair stays alive in the
    model, and the rest of the list is judged as usual."""
    m = with_pair()
    with pytest.raises(ContractViolation, match=f"^{clause}"):
        judge(m, c("list"), out(rows))
    tolerant = replace(m, tolerated=frozenset({clause}))
    judged = judge(tolerant, c("list"), out(rows))
    assert [noted for noted, _ in judged.noted] == [clause]
    assert judged.model.pair("bash", "a") == m.pair("bash", "a")
    with pytest.raises(ContractViolation, match="^list.fields"):
        judge(tolerant, c("list"), out([{**entry("bash", "a", "/s/a"), "has_os_env": False}]))


def test_a_known_new_socket_on_already_running_is_noted_and_the_pair_keeps_its_own() -> None:
    m = with_pair()
    again = c("launch", terminal="bash", session="a")
    with pytest.raises(ContractViolation, match="^launch.socket-kept"):
        judge(m, again, launched("bash", "a", "/s/new", "already_running"))
    tolerant = replace(m, tolerated=frozenset({"launch.socket-kept"}))
    judged = judge(tolerant, again, launched("bash", "a", "/s/new", "already_running"))
    assert [clause for clause, _ in judged.noted] == ["launch.socket-kept"] and judged.model.pair("bash", "a").socket == "/s/a"
    with pytest.raises(ContractViolation, match="^launch.already-running"):
        judge(tolerant, again, launched("bash", "a", "/s/new"))


def test_a_closed_pair_still_listed_is_not_taken_for_another_sessions() -> None:
    """A row on a socket one of this session's launches reported is its own: a pair it closed that
    stays listed breaks list.registered (the closed-still-listed bug), not the session scope."""
    m = judge(with_pair(), c("close", terminal="bash", session="a"),
              out({"terminal": "bash", "session": "a", "status": "closed"})).model
    with pytest.raises(ContractViolation, match="^list.registered"):
        judge(replace(m, tolerated=frozenset({"scope.session"})), c("list"), out([entry("bash", "a", "/s/a", running=False)]))


# --- resource events ------------------------------------------------------------------------------

def test_resource_base_id() -> None:
    assert resource_base_id("bash", "a b") == "terminal_bash_a_b"
    assert resource_base_id("bash", "a:b") == "terminal_bash_a_b"
    assert resource_base_id("bash", "é") == "terminal_bash_resource"
    assert resource_base_id("bash", "-x.y") == "terminal_bash_-x.y"
    assert resource_base_id("bash", "__a__") == "terminal_bash_a"


def test_events_created_deleted_and_unique_ids() -> None:
    m = with_pair(with_pair(s="a b", sock="/s/1"), s="a:b", sock="/s/2")
    created = [EventView("session.resource.created", "terminal_bash_a_b", "bash", "a b"),
               EventView("session.resource.created", "terminal_bash_a_b_2", "bash", "a:b")]
    rec = reconcile_events(m, Ledger(), created)
    assert not rec.missing
    with pytest.raises(ContractViolation, match="unique"):
        reconcile_events(m, Ledger(), [created[0], replace(created[1], resource_id="terminal_bash_a_b")])
    with pytest.raises(ContractViolation, match="alive"):
        reconcile_events(m, Ledger(), [*created, EventView("session.resource.deleted", "terminal_bash_a_b", "bash", "a b")])
    assert reconcile_events(m, Ledger(), created[:1]).missing
    closed = judge(m, c("close", terminal="bash", session="a b"),
                   out({"terminal": "bash", "session": "a b", "status": "closed"})).model
    assert reconcile_events(closed, rec.ledger, created).missing
    done = reconcile_events(closed, rec.ledger, [*created, EventView("session.resource.deleted", "terminal_bash_a_b")])
    assert not done.missing
    with pytest.raises(ContractViolation):
        reconcile_events(closed, done.ledger, [*created, EventView("session.resource.deleted", "terminal_bash_a_b"),
                                               EventView("session.resource.deleted", "terminal_bash_a_b")])


def test_events_of_the_baseline_are_ignored() -> None:
    base = initial_model(("bash",), out([entry("tui", "main", "/s/t")]))
    rec = reconcile_events(base, Ledger(), [EventView("session.resource.created", "terminal_tui_main", "tui", "main")])
    assert not rec.missing and rec.ledger.ignored == 1


def test_a_wrong_resource_id_is_a_violation() -> None:
    m = with_pair(s="a b")
    with pytest.raises(ContractViolation):
        reconcile_events(m, Ledger(), [EventView("session.resource.created", "terminal_bash_a b", "bash", "a b")])
    with pytest.raises(ContractViolation):
        reconcile_events(m, Ledger(), [EventView("session.resource.created", "terminal_bash_a_b_1", "bash", "a b")])


@pytest.mark.parametrize("statuses", [("launched", "launched", "already_running"),
                                      ("already_running", "launched", "launched"),
                                      ("launched", "already_running", "launched")])
def test_concurrent_launches_that_both_say_launched_break_one_clause_in_any_answer_order(statuses: tuple[str, ...]) -> None:
    """One bug, one clause: whichever of the three answers came first, two `launched` for one pair
    is launch.already-running (what a campaign tells bugs apart by)."""
    call = c("launch", terminal="bash", session="a")
    with pytest.raises(ContractViolation) as failure:
        judge_step(EMPTY, [call] * 3, [launched("bash", "a", "/s/a", s) for s in statuses])
    assert failure.value.clause == "launch.already-running"
