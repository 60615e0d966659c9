"""The after-turn checks (stateful/after_turn.py), each run on a fake agent session: no terminal,
no server. Every check must pass on a correct answer and fail, naming its clause, on a wrong one."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from stateful import after_turn
from stateful.clauses import clause_of
from stateful.model import Call, EventView, initial_model
from stateful.targets.base import AgentSession, Target
from stateful.world import DECLARED, CLOSE, LAUNCH, LIST, READ, Agent, MachineConfig, World

SOCKET = "/nowhere/stateful-test/tmux.sock"  # not on this machine: the probe stays off


class FakeSession(AgentSession):
    """Answers each call with what ``answer(call)`` says; reports the events and view it is given."""

    label = "fake"

    def __init__(self, answer: Callable[[Call], Any]) -> None:
        self.answer = answer
        self.recorded: list[EventView] = []
        self.view: list[Mapping[str, Any]] | None = None

    def run_turn(self, steps: Sequence[Sequence[Call]], *, step_timeout: float) -> list[list[str]]:
        return [[json.dumps(self.answer(call)) for call in step] for step in steps]

    def events(self) -> list[EventView]:
        return list(self.recorded)

    def terminals_view(self) -> list[Mapping[str, Any]] | None:
        return self.view

    def delete(self) -> None:
        pass


class FakeTarget(Target):
    name = "fake"
    where = "a fake target"
    events_with_calls = True
    declared = {name: "bash" for name in DECLARED}

    def open_session(self) -> AgentSession:
        raise NotImplementedError

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def outside_hypothesis(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checks record notes and events, which exist only inside a Hypothesis test: kept here."""
    recorded: list[str] = []
    from stateful import world as world_module
    for module in (world_module, after_turn):
        for name in ("note", "event"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, recorded.append)
    return recorded


def launched(terminal: str, session: str, socket: str = SOCKET) -> dict[str, Any]:
    return {"status": "launched", "terminal": terminal, "session": session, "tmux_socket": socket,
            "has_os_env": True}


def call(tool: str, **args: Any) -> Call:
    return Call(tool, json.dumps(args))


def world_with(session: FakeSession) -> tuple[World, Agent]:
    world = World(FakeTarget(), MachineConfig(poll_deadline=1, probe=False))
    agent = Agent(0, session, initial_model(DECLARED, "[]"))
    world.live.append(agent)
    return world, agent


def test_the_checks_run_in_a_stated_order() -> None:
    assert [c.__name__ for c in after_turn.AFTER_CALL] == ["track_shells", "screen_isolation", "rows_exact"]
    assert [c.__name__ for c in after_turn.AFTER_TURN] == [
        "private_servers", "events_recorded", "ground_truth", "coverage"]


def test_a_correct_launch_passes_every_check_and_moves_the_model() -> None:
    session = FakeSession(lambda c: launched("bash", "a") if c.tool == LAUNCH else [
        {"terminal": "bash", "session": "a", "command": "bash", "running": True, "has_os_env": True,
         "tmux_socket": SOCKET}])
    world, agent = world_with(session)
    session.recorded.append(EventView("session.resource.created", "terminal_bash_a", "bash", "a"))
    judged = after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")], [call(LIST)]])
    assert [j.value["status"] for j in judged[0]] == ["launched"]
    assert [p.key for p in agent.model.alive()] == [("bash", "a")]
    assert list(agent.shells) == [agent.model.pair("bash", "a").instance]  # track_shells
    assert agent.ledger.id_of(agent.model.pair("bash", "a").instance) == "terminal_bash_a"  # matched to the launch


def test_a_wrong_output_names_its_clause_and_where() -> None:
    session = FakeSession(lambda c: {"status": "launched"})
    world, agent = world_with(session)
    with pytest.raises(AssertionError) as failure:
        after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")]])
    assert clause_of(failure.value) == "launch.result"
    assert "where: turn 1, step 0 of agent 0 on a fake target" in str(failure.value)


def test_a_missing_event_fails_at_once_where_the_target_records_events_with_the_calls() -> None:
    session = FakeSession(lambda c: launched("bash", "a"))
    world, agent = world_with(session)
    with pytest.raises(AssertionError) as failure:
        after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")]])
    assert clause_of(failure.value) == "events.recorded"
    assert "once the calls returned" in str(failure.value)


def test_a_marker_in_another_pairs_screen_breaks_isolation() -> None:
    session = FakeSession(lambda c: {"screen": "$ echo MK_42_u1\nMK_42_u1\n", "scrollback_lines": 0})
    world, agent = world_with(session)
    world.owners["u1"] = (1, "bash", "other")
    read = call(READ, terminal="bash", session="a")
    judgement = after_turn.Judgement(agent.model, "read", json.loads(session.run_turn([[read]], step_timeout=1)[0][0]))
    ctx = after_turn.TurnContext(world, agent, 1, [[read]], [[""]], {}, frozenset())
    with pytest.raises(AssertionError) as failure:
        after_turn.screen_isolation(ctx, read, judgement)
    assert clause_of(failure.value) == "screen.isolation"
    world.owners["u1"] = (0, "bash", "a")  # its own marker: fine
    after_turn.screen_isolation(ctx, read, judgement)


def test_two_live_pairs_on_one_socket_break_private_servers() -> None:
    answers = iter([launched("bash", "a"), launched("sh", "b", socket=SOCKET + "2")])
    session = FakeSession(lambda c: next(answers))
    world, agent = world_with(session)
    session.recorded += [EventView("session.resource.created", "terminal_bash_a", "bash", "a"),
                         EventView("session.resource.created", "terminal_sh_b", "sh", "b")]
    after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")],
                                       [call(LAUNCH, terminal="sh", session="b")]])
    other_session = FakeSession(lambda c: launched("bash", "a"))
    other = Agent(1, other_session, initial_model(DECLARED, "[]"))
    world.live.append(other)
    other_session.recorded.append(EventView("session.resource.created", "terminal_bash_a", "bash", "a"))
    with pytest.raises(AssertionError) as failure:  # agent 1's pair got agent 0's server
        after_turn.run_turn(world, other, [[call(LAUNCH, terminal="bash", session="a")]])
    assert clause_of(failure.value) == "launch.private-server"


def test_the_view_must_drop_a_closed_terminal() -> None:
    state = {"closed": False}

    def answer(c: Call) -> Any:
        if c.tool == LAUNCH:
            return launched("bash", "a")
        state["closed"] = True
        return {"status": "closed", "terminal": "bash", "session": "a"}

    session = FakeSession(answer)
    world, agent = world_with(session)
    session.recorded.append(EventView("session.resource.created", "terminal_bash_a", "bash", "a"))
    after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="a")]])
    session.view = [{"id": "terminal_bash_a"}]
    after_turn.check_view(world, agent)  # listed while it runs: fine
    session.recorded.append(EventView("session.resource.deleted", "terminal_bash_a", "bash", "a"))
    after_turn.run_turn(world, agent, [[call(CLOSE, terminal="bash", session="a")]])
    with pytest.raises(AssertionError) as failure:
        after_turn.check_view(world, agent)
    assert clause_of(failure.value) == "view.terminals"
    session.view = []
    after_turn.check_view(world, agent)


def test_the_view_of_id_siblings_launched_together_is_judged_in_every_assignment_left() -> None:
    """Unnamed events (a server may leave the pair out of ``resource``) of id siblings launched in one
    reply leave open which holds ``terminal_bash_1``: a view naming them by id is right either way,
    until a deleted event decides."""
    def answer(c: Call) -> Any:
        args = json.loads(c.arguments)
        if c.tool == LAUNCH:
            return launched("bash", args["session"], f"{SOCKET}-{args['session']}")
        return {"status": "closed", "terminal": "bash", "session": args["session"]}

    session = FakeSession(answer)
    world, agent = world_with(session)
    session.recorded += [EventView("session.resource.created", "terminal_bash_1"),
                         EventView("session.resource.created", "terminal_bash_1_2")]
    after_turn.run_turn(world, agent, [[call(LAUNCH, terminal="bash", session="%1"),
                                        call(LAUNCH, terminal="bash", session="_%1_")]])
    assert len(agent.ledger.assignments) == 2
    session.view = [{"id": "terminal_bash_1"}, {"id": "terminal_bash_1_2"}]
    after_turn.check_view(world, agent)
    session.recorded.append(EventView("session.resource.deleted", "terminal_bash_1"))
    after_turn.run_turn(world, agent, [[call(CLOSE, terminal="bash", session="_%1_")]])
    assert len(agent.ledger.assignments) == 1  # '_%1_' held terminal_bash_1
    session.view = [{"id": "terminal_bash_1_2"}]
    after_turn.check_view(world, agent)
    session.view = [{"id": "terminal_bash_1"}]  # the closed one's id
    with pytest.raises(AssertionError) as failure:
        after_turn.check_view(world, agent)
    assert clause_of(failure.value) == "view.terminals"
