"""Steering (stateful/steering.py): a violation names the input that provoked it, and strategies told
to avoid that input never draw it."""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateful import steering
from stateful import strategies as gen
from stateful.clauses import ContractViolation, fail
from stateful.model import Call, initial_model, judge, judge_step

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def avoiding() -> Iterator[None]:
    """Every trigger avoided for the test, none after it (the module's state is global)."""
    steering.avoid(steering.TRIGGERS)
    try:
        yield
    finally:
        steering.avoid(())


@FAST
@given(cmd=st.text(st.sampled_from("ab -;\\"), min_size=1, max_size=40), plan=gen.send_plans(),
       edges=st.sampled_from((";", "-", "-;")))
def test_a_plan_that_avoids_edges_never_cuts_next_to_them(cmd: str, plan: gen.SendPlan, edges: str) -> None:
    from dataclasses import replace

    sends = gen.split_command(cmd, replace(plan, no_edges=edges))
    chunks = [str(s.get("text") or "") for s in sends if s.get("text")]
    assert "".join(chunks).removesuffix("\n") == cmd
    if ";" in edges:
        assert not any(c.endswith(";") for c in chunks[:-1]), chunks
    if "-" in edges:
        assert not any(c.startswith("-") for c in chunks[1:]), chunks


def test_strategies_avoid_what_they_are_told(avoiding: None) -> None:
    @FAST
    @given(semicolon=gen.marker_semicolons(), long=gen.long_payloads(), plan=gen.send_plans(),
           scrollback=gen.scrollbacks(), bad=gen.bad_scrollbacks(), copies=gen.launch_copies(),
           deco=gen.decorations())
    def drawn(semicolon: bool, long: gen.LongText, plan: gen.SendPlan, scrollback: object, bad: object,
              copies: int, deco: gen.Decoration) -> None:
        assert semicolon is False and copies == 1
        assert not {k for k, _ in deco.extra} & steering.OUTPUT_FIELDS
        assert ";" not in long.text and "-" not in long.text
        assert plan.no_edges == "-;"
        assert not isinstance(scrollback, bool) and not isinstance(bad, bool)

    drawn()


def test_strategies_draw_every_input_when_nothing_is_avoided() -> None:
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(semicolon=gen.marker_semicolons(), bad=gen.bad_scrollbacks(), copies=gen.launch_copies(),
           plan=gen.send_plans(), deco=gen.decorations())
    def drawn(semicolon: bool, bad: object, copies: int, plan: gen.SendPlan, deco: gen.Decoration) -> None:
        assert plan.no_edges == ""
        seen.update({"semicolon"} if semicolon else set())
        seen.update({"bool"} if isinstance(bad, bool) else set())
        seen.update({"copies"} if copies > 1 else set())
        seen.update({"output-key"} if {k for k, _ in deco.extra} & steering.OUTPUT_FIELDS else set())

    drawn()
    assert seen == {"semicolon", "bool", "copies", "output-key"}


def test_a_plan_prints_its_edges_only_when_it_avoids_some() -> None:
    assert repr(gen.SendPlan()) == "SendPlan(cuts=(), finish='default')"
    assert repr(gen.SendPlan((), "Enter", "-;")) == "SendPlan(cuts=(), finish='Enter', no_edges='-;')"
    assert eval(repr(gen.SendPlan((gen.Cut(True, 3),), "Enter", ";")), vars(gen)) == \
        gen.SendPlan((gen.Cut(True, 3),), "Enter", ";")


@pytest.mark.parametrize("texts, triggers", [
    (["set +H;", " echo x"], ("semicolon-edge",)),
    (["-x"], ("dash-edge",)),
    (["echo a-b; c"], ()),
    (["x" * 600 + "-" + ";" + "y"], ("dash-edge", "semicolon-edge")),
])
def test_text_triggers_name_the_edges_a_chunk_has(texts: list[str], triggers: tuple[str, ...]) -> None:
    assert steering.text_triggers(texts) == triggers


def _violation(model_call: Call, output: dict[str, object]) -> ContractViolation:
    baseline = [{"terminal": "tui", "session": "main", "command": "tui", "running": True, "has_os_env": True,
                 "tmux_socket": "/s/t"}]
    model = initial_model(("bash",), json.dumps(baseline))
    launch = Call("sys_terminal_launch", json.dumps({"terminal": "bash", "session": "a"}))
    model = judge(model, launch, json.dumps({"terminal": "bash", "session": "a", "status": "launched",
                                             "has_os_env": True, "tmux_socket": "/s/a"})).model
    with pytest.raises(ContractViolation) as caught:
        judge(model, model_call, json.dumps(output))
    return caught.value


def test_the_model_names_the_trigger_of_a_violation() -> None:
    bool_read = Call("sys_terminal_read", json.dumps({"terminal": "bash", "session": "a", "scrollback": True}))
    error = _violation(bool_read, {"terminal": "bash:a", "screen": "", "scrollback_lines": 0})
    assert error.clause == "read.scrollback-type" and error.triggers == ("bool-scrollback",)
    int_read = Call("sys_terminal_read", json.dumps({"terminal": "bash", "session": "a", "scrollback": -1}))
    error = _violation(int_read, {"terminal": "bash:a", "screen": "", "scrollback_lines": 0})
    assert error.clause == "read.scrollback-type" and error.triggers == ()
    server_made = Call("sys_terminal_read", json.dumps({"terminal": "tui", "session": "main"}))
    error = _violation(server_made, {"terminal": "tui:main", "screen": "", "scrollback_lines": 0})
    assert error.clause == "scope.server-terminals" and error.triggers == ("server-terminals",)


def test_a_violation_keeps_its_triggers_across_processes() -> None:
    with pytest.raises(ContractViolation) as caught:
        fail("send.text-literal", "the `;` was dropped", triggers=("semicolon-edge",))
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.triggers == ("semicolon-edge",) and str(copy) == str(caught.value)
    with pytest.raises(ContractViolation) as plain:
        fail("send.text-literal", "x")
    assert plain.value.triggers == ()


def test_the_server_terminals_rule_is_not_drawn_once_avoided(avoiding: None) -> None:
    from hypothesis.stateful import RULE_MARKER

    from stateful.targets.registry import DirectMachine

    rule = getattr(DirectMachine.server_made, RULE_MARKER)
    assert not all(holds(None) for holds in rule.preconditions)  # this precondition never looks at the machine
    steering.avoid(())
    assert all(holds(None) for holds in rule.preconditions)


def test_a_search_ends_once_a_known_failure_names_an_input_it_still_draws(tmp_path: Path) -> None:
    """What a search draws is fixed when it starts: the gate ends it at the next program once a
    failure became known with a trigger it does not avoid yet (the next search will)."""
    from stateful.campaign import seen
    from stateful.campaign.gate import Gate, Resteer

    ran: list[int] = []
    gate = Gate(seen_dir=tmp_path, allowed=frozenset(), worker=0, started=0.0, deadline=time.time() + 60)
    program = gate._guard(lambda: ran.append(1))
    program()
    seen.avoid(tmp_path, ["semicolon-edge"])
    with pytest.raises(Resteer):
        program()
    gate.steered = frozenset({"semicolon-edge"})
    program()
    assert ran == [1, 1]
    replaying = Gate(seen_dir=tmp_path, allowed=frozenset(), worker=0, started=0.0, deadline=time.time() + 60,
                     resteer=False)  # a search replaying the example database first is not cut short
    replaying._guard(lambda: ran.append(3))()
    assert ran == [1, 1, 3]
    ran.pop()
    quiet = Gate(seen_dir=tmp_path, allowed=frozenset(), worker=0, started=0.0, deadline=time.time() + 60, steer=False)
    quiet._guard(lambda: ran.append(2))()
    assert ran == [1, 1, 2]


def test_launch_copies_name_their_trigger_only_for_the_clause_they_provoke() -> None:
    """Two launches of one pair in one reply provoke launch.already-running (both say launched);
    another clause broken beside them does not steer a campaign away from copies."""
    baseline = [{"terminal": "tui", "session": "main", "command": "tui", "running": True, "has_os_env": True,
                 "tmux_socket": "/s/t"}]
    model = initial_model(("bash",), json.dumps(baseline))
    launch = Call("sys_terminal_launch", json.dumps({"terminal": "bash", "session": "a"}))
    launched = {"terminal": "bash", "session": "a", "status": "launched", "has_os_env": True, "tmux_socket": "/s/a"}
    with pytest.raises(ContractViolation) as both:
        judge_step(model, [launch, launch], [json.dumps(launched)] * 2)
    assert both.value.clause == "launch.already-running" and both.value.triggers == ("launch-copies",)
    wrong_pair = {**launched, "session": "b", "status": "already_running"}
    with pytest.raises(ContractViolation) as other:
        judge_step(model, [launch, launch], [json.dumps(launched), json.dumps(wrong_pair)])
    assert other.value.clause == "launch.result" and other.value.triggers == ()


def test_output_fields_are_the_contracts_words_that_no_argument_uses() -> None:
    assert steering.OUTPUT_FIELDS == set(gen.CONTRACT_VOCABULARY) - gen.NAMED_KEYS


def test_an_extra_key_named_like_an_output_field_is_a_trigger_beside_the_others() -> None:
    """omnigent 0.19.1 answers a call whose arguments hold ``error`` with the arguments themselves: the
    violation names ``output-keys`` (a campaign then stops drawing such keys), beside a text's edge."""
    erring = json.dumps({"terminal": "bash", "session": "a", "error": {"6": 1}})
    assert steering.call_triggers("launch.one-launched", "sys_terminal_launch", erring) == ("output-keys",)
    plain = json.dumps({"terminal": "bash", "session": "a", "text2": 1})
    assert steering.call_triggers("launch.one-launched", "sys_terminal_launch", plain) == ()
    dashed = json.dumps({"terminal": "bash", "session": "a", "text": "-x", "status": 1})
    assert steering.call_triggers("send.sent", "sys_terminal_send", dashed) == ("dash-edge", "output-keys")
    from stateful.causes import call_causes, primary
    assert primary(call_causes("send.sent", "sys_terminal_send", dashed)) == "dash-edge"  # the text names it first
    assert primary(call_causes("close.not-found", "sys_terminal_close", erring)) == "output-keys"


def test_a_search_ends_once_a_finding_it_goes_on_past_is_given_back(tmp_path: Path) -> None:
    """A search goes on past the findings known when it started. One of them given back (its claimer
    died mid-shrink, or its search ended without a report) must be met again, claimed and shrunk:
    the gate ends the search at its next program, and the next search fails on it (ci16: a search on
    a busy box went on past it until the deadline, and the finding was reported unshrunk)."""
    from stateful.campaign import seen
    from stateful.campaign.gate import Gate, Resteer

    ran: list[int] = []
    assert seen.claim(tmp_path, "read.scrollback-type@bool-scrollback", {"worker": 1})
    gate = Gate(seen_dir=tmp_path, allowed=frozenset(), worker=0, started=0.0, deadline=time.time() + 60)
    gate.going_on = seen.claimed(tmp_path)  # as the worker sets it when the search starts
    program = gate._guard(lambda: ran.append(1))
    program()
    seen.release(tmp_path, "read.scrollback-type@bool-scrollback")
    with pytest.raises(Resteer):
        program()
    assert gate.given_back  # the next search replays the example database first
    gate.going_on, gate.given_back = seen.claimed(tmp_path), False  # the next search
    program()
    assert ran == [1, 1]
    assert seen.claim(tmp_path, "list.order", {"worker": 1})  # a new finding ends it too, but gives nothing back
    with pytest.raises(Resteer):
        program()
    assert not gate.given_back


def test_the_search_after_one_a_given_back_finding_ended_replays_the_example_database(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure a dead or interrupted claimer gave back was saved in the example database when it
    was found: the next search replays that first, so the finding is met again at once, not when a
    search happens on it (ci20: the survivor did not meet it again before the deadline)."""
    from hypothesis import Phase

    from stateful.campaign.worker import Worker, WorkerConfig
    from stateful.profiles import machine_configs

    machine_configs()  # the campaign profile, as the worker registers it when it opens its target
    (tmp_path / "seen").mkdir()
    config = WorkerConfig(target="direct", external=None, stack_latency=0.0, allowed=[], started=time.time(),
                          deadline=time.time() + 60, shrink_budget=5.0, repro_dir=None, db=str(tmp_path / "db"))
    worker = Worker(tmp_path, 1, config)  # not worker 0, whose first search replays it anyway
    phases: list[bool] = []

    def search(machine: type, target: object, run_settings: object, seed: int) -> bool:
        phases.append(Phase.reuse in run_settings.phases)  # type: ignore[attr-defined]
        worker.gate.given_back = len(phases) == 2  # the second search ends on a finding given back
        return len(phases) < 4

    monkeypatch.setattr(worker, "search", search)
    generated: list[bool] = []
    original = search

    def search_and_phases(machine: type, target: object, run_settings: object, seed: int) -> bool:
        generated.append(Phase.generate in run_settings.phases)  # type: ignore[attr-defined]
        return original(machine, target, run_settings, seed)

    monkeypatch.setattr(worker, "search", search_and_phases)
    worker.run(object, None)
    assert phases == [False, False, True, False]
    # the replay is a search of its own (issue 38): one that generated too could not end early, and went on
    # rejecting a pervasive failure another worker found meanwhile until the deadline
    assert generated == [True, True, False, True]
