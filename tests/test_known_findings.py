"""Issue 23: a failure's identity is its clause and its cause, and a program goes on past a known
violation wherever its check knows how to keep the model exact (stateful/causes.py,
clauses.deviate, the campaign's gate)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from stateful import after_turn, causes, clauses
from stateful.campaign import seen
from stateful.campaign.gate import Gate, failure_key
from stateful.clauses import ContractViolation, clause_of, deviate, fail, violation
from stateful.model import judge, judge_step
from stateful.world import READ
from tests.test_after_turn import FakeSession, call, outside_hypothesis, world_with  # noqa: F401 (fixture)
from tests.test_model import EMPTY, c, entry, launched, out, with_pair


@pytest.fixture(autouse=True)
def nothing_known() -> Any:
    clauses.know()
    yield
    clauses.know()


# -- identity ----------------------------------------------------------------------------------------

def test_a_text_names_its_causes_most_specific_first() -> None:
    assert causes.text_causes(["echo a;"]) == ("semicolon-edge",)
    assert causes.text_causes(["x" * 5000]) == ("long-text",)
    assert causes.text_causes(["é" * 2100]) == ("long-text", "non-ascii")  # 4200 bytes
    assert causes.text_causes(["-x", "é"]) == ("dash-edge", "non-ascii")
    assert causes.text_causes(["echo hi"]) == ()


def test_a_findings_key_is_its_clause_and_its_primary_cause() -> None:
    long_cut = violation("send.text-literal", "cut", causes=causes.text_causes(["0123456789abcdef" * 1100]))
    semicolon = violation("send.text-literal", "lost ;", triggers=("semicolon-edge",))
    plain = violation("read.rows-exact", "one row short")
    assert (long_cut.key, semicolon.key, plain.key) == (
        "send.text-literal@long-text", "send.text-literal@semicolon-edge", "read.rows-exact")
    assert failure_key(long_cut) == long_cut.key
    assert causes.split_key(long_cut.key) == ("send.text-literal", "long-text")
    assert causes.split_key(plain.key) == ("read.rows-exact", None)


def test_what_a_call_carries_names_a_finding_before_the_context_it_ran_in() -> None:
    """A boolean scrollback read beside another call, on a pair that exited, is still the
    bool-scrollback finding: a busier program meeting one bug must not make it a second finding."""
    busy = violation("read.scrollback-type", "accepted", causes=("several-calls", "exited-pair", "bool-scrollback"))
    assert busy.key == "read.scrollback-type@bool-scrollback"
    assert causes.primary(("exited-pair", "several-calls")) == "several-calls"
    assert causes.primary(("several-calls", "launch-copies")) == "launch-copies"


@pytest.mark.parametrize(("clause", "named", "known", "is_known"), [
    ("send.text-literal", ("semicolon-edge",), ["send.text-literal@semicolon-edge"], True),
    ("send.text-literal", ("long-text",), ["send.text-literal@semicolon-edge"], False),
    # a long text holding a `;` that a server may split at names both: it is the known one
    ("send.text-literal", ("long-text", "semicolon-edge"), ["send.text-literal@semicolon-edge"], True),
    ("read.rows-exact", (), ["read.rows-exact@big-scrollback"], False),
    ("read.rows-exact", ("big-scrollback",), ["read.rows-exact"], False),
    ("read.rows-exact", (), ["read.rows-exact"], True),
    ("read.history", (), ["read.rows-exact"], False),
])
def test_a_violation_is_a_known_finding_only_if_it_names_that_findings_cause(
        clause: str, named: tuple[str, ...], known: list[str], is_known: bool) -> None:
    assert (causes.known_by(clause, named, known) is not None) is is_known


def test_a_violation_keeps_its_causes_across_processes() -> None:
    import pickle

    with pytest.raises(ContractViolation) as caught:
        fail("send.text-literal", "cut", causes=("long-text",))
    assert pickle.loads(pickle.dumps(caught.value)).key == "send.text-literal@long-text"


def gate(tmp_path: Path, allowed: frozenset[str] = frozenset()) -> Gate:
    (tmp_path / "seen").mkdir(exist_ok=True)
    return Gate(seen_dir=tmp_path / "seen", allowed=allowed, worker=0, started=0.0, deadline=1e12)


def test_a_claimed_clause_met_by_another_cause_is_a_new_finding(tmp_path: Path) -> None:
    g = gate(tmp_path)
    assert seen.claim(g.seen_dir, "send.text-literal@semicolon-edge", {})
    g.ignored = seen.claimed(g.seen_dir)
    # the known cause: met again, the program is rejected
    assert g._ignores(violation("send.text-literal", "lost ;", triggers=("semicolon-edge",)))
    assert g.repeats == {"send.text-literal@semicolon-edge": 1}
    # another cause of the same clause: claimed as a finding of its own, let through to be shrunk
    assert not g._ignores(violation("send.text-literal", "cut", causes=("long-text",)))
    assert g.run_claims == {"send.text-literal@long-text"}
    assert seen.info(g.seen_dir, "send.text-literal@long-text")["cause"] == "long-text"
    # while it is shrunk, the same clause with a cause no other finding has is still this one
    assert not g._ignores(violation("send.text-literal", "x"))
    assert g._ignores(violation("send.text-literal", "lost ;", triggers=("semicolon-edge",)))


def test_an_allowed_clause_is_known_whatever_its_cause(tmp_path: Path) -> None:
    g = gate(tmp_path, frozenset({"read.rows-exact"}))
    assert g._ignores(violation("read.rows-exact", "short", causes=("big-scrollback",)))
    assert g._ignores(violation("read.rows-exact", "short"))
    assert g.known == {"read.rows-exact": 2} and not seen.claimed(g.seen_dir)


# -- going on past a known violation -----------------------------------------------------------------

def test_deviate_fails_unless_the_run_knows_the_violation() -> None:
    with pytest.raises(ContractViolation) as unknown:
        deviate("read.rows-exact", "short")
    assert clause_of(unknown.value) == "read.rows-exact"
    clauses.know(findings=["read.rows-exact@big-scrollback"])
    with pytest.raises(ContractViolation):
        deviate("read.rows-exact", "short")  # the clause's finding with no cause is not known
    deviate("read.rows-exact", "capped", causes=("big-scrollback",))
    deviate("read.rows-exact", "capped again", causes=("big-scrollback",))
    met = clauses.deviations()
    assert met.met == {"read.rows-exact@big-scrollback": 2}
    assert str(met.examples["read.rows-exact@big-scrollback"]).startswith("read.rows-exact: capped\n") or \
        str(met.examples["read.rows-exact@big-scrollback"]) == "read.rows-exact: capped"


def test_only_clauses_that_declare_how_to_go_on_can_be_gone_past() -> None:
    clauses.know(allowed=["launch.result"])
    with pytest.raises(AssertionError, match="declares no way to go on"):
        deviate("launch.result", "x")
    assert {c.id for c in clauses.CLAUSES.values() if c.goes_on} == set(clauses.GOES_ON)
    assert "read.rows-exact" in clauses.GOES_ON and "launch.result" not in clauses.GOES_ON


def rows_context(rows: int, scrollback: int, held: int, exact_below: int | None = None, short: int = 0) -> Any:
    """A read of an idle pane holding ``held`` lines of history that answers ``rows`` rows (and,
    for a scrollback of at most ``exact_below``, the exact count less ``short``)."""
    def answer(c: Any) -> dict[str, Any]:
        asked = json.loads(c.arguments).get("scrollback", 0)
        n = min(asked, held) + 24 - short if exact_below is not None and asked <= exact_below else rows
        return {"terminal": "bash:a", "screen": "x\n" * n, "scrollback_lines": asked}
    session = FakeSession(answer)
    world, agent = world_with(session)
    world.probe.history_size = lambda socket: held  # type: ignore[method-assign]
    read = call(READ, terminal="bash", session="a", scrollback=scrollback)
    judgement = after_turn.Judgement(agent.model, "read", answer(read))
    ctx = after_turn.TurnContext(world, agent, 1, [[read]], [[""]], {("bash", "a"): ("/s", held)}, frozenset())
    return ctx, read, judgement


def test_a_known_rows_violation_is_noted_and_the_program_goes_on() -> None:
    ctx, read, judgement = rows_context(rows=24 + 4, scrollback=9000, held=5)
    with pytest.raises(ContractViolation) as first:
        after_turn.rows_exact(ctx, read, judgement)
    assert first.value.key == "read.rows-exact"  # one short whatever the size: no cause
    clauses.know(findings=["read.rows-exact"])
    after_turn.rows_exact(ctx, read, judgement)  # goes on
    # the read of 9000 and the read of 1000 made to tell the cause: both wrong, both noted
    assert clauses.deviations().met == {"read.rows-exact": 2}


def test_a_scrollback_over_1000_is_the_cause_only_where_a_read_of_1000_is_exact() -> None:
    ctx, read, judgement = rows_context(rows=24, scrollback=9000, held=1500, exact_below=1000)
    with pytest.raises(ContractViolation) as capped:
        after_turn.rows_exact(ctx, read, judgement)
    assert capped.value.key == "read.rows-exact@big-scrollback"
    clauses.know(findings=["read.rows-exact"])  # the other finding of the clause does not cover it
    with pytest.raises(ContractViolation):
        after_turn.rows_exact(ctx, read, judgement)


def test_the_read_that_tells_the_cause_is_counted_as_a_turn_of_the_conversation() -> None:
    """The check's read of 1000 is no step of the program, but the server's conversation grows by it
    like by any turn: it is counted there (the conversation budget, issue 27) and in the transcript."""
    ctx, read, judgement = rows_context(rows=24, scrollback=9000, held=1500, exact_below=1000)
    type(ctx.world.target).carries_conversation = True  # as the sessions target: its turns carry one
    try:
        turns, before = ctx.world.turns, ctx.agent.conversation
        with pytest.raises(ContractViolation):
            after_turn.rows_exact(ctx, read, judgement)
    finally:
        del type(ctx.world.target).carries_conversation
    assert ctx.world.turns == turns + 1 and ctx.agent.conversation > before + 1000 * 2
    assert '"scrollback": 1000' in "\n".join(ctx.world.transcript.lines)


def test_a_capped_scrollback_is_told_apart_even_where_every_read_is_also_one_row_short() -> None:
    # both faults at once: a big read shows no history, a read of 1000 one row too few: the size
    # changes the failure, so the size is its cause
    ctx, read, judgement = rows_context(rows=24, scrollback=9000, held=300, exact_below=1000, short=1)
    with pytest.raises(ContractViolation) as capped:
        after_turn.rows_exact(ctx, read, judgement)
    assert capped.value.key == "read.rows-exact@big-scrollback"


def test_a_repro_names_its_finding_and_replay_says_when_it_fails_by_another_cause() -> None:
    from stateful.repro import render_repro
    from stateful.replay import FINDING

    capped = violation("read.rows-exact", "24 rows", causes=("big-scrollback",))
    text = render_repro("direct", ["state = TerminalMachine()", "pairs_0 = state.start(terminal='sh', name='main')"], capped)
    assert "FINDING = 'read.rows-exact@big-scrollback'" in text and "repro_machine(TARGET, program, finding=FINDING)" in text
    compile(text, "repro.py", "exec")
    same = FINDING.search("E   finding: read.rows-exact@big-scrollback\n")
    assert same is not None and same.groups() == ("read.rows-exact@big-scrollback", None)
    other = FINDING.search("E   finding: read.rows-exact (this repro was written for read.rows-exact@big-scrollback: "
                           "the program now breaks its clause by another cause, so it fails for both)\n")
    assert other is not None and other.groups() == ("read.rows-exact", "read.rows-exact@big-scrollback")


def test_a_call_on_a_pair_told_to_exit_names_that_cause() -> None:
    from dataclasses import replace

    from stateful.model import Call, Life, PairState, SessionModel, _fail

    alive = SessionModel(declared=("bash",), pairs=(PairState("bash", "a", "/s", 1, Life.ALIVE, (0,)),))
    exiting = replace(alive, pairs=(replace(alive.pairs[0], life=Life.EXITING),))
    read = Call(READ, json.dumps({"terminal": "bash", "session": "a"}))
    for model, key in ((alive, "read.result"), (exiting, "read.result@exited-pair")):
        with pytest.raises(ContractViolation) as caught:
            _fail("read.result", read, "{}", "no screen", model)
        assert caught.value.key == key


def test_past_a_known_capped_read_the_read_of_1000_is_judged_and_shows_the_other_bug() -> None:
    ctx, read, judgement = rows_context(rows=24, scrollback=9000, held=300, exact_below=1000, short=1)
    clauses.know(findings=["read.rows-exact@big-scrollback"])
    with pytest.raises(ContractViolation) as short:
        after_turn.rows_exact(ctx, read, judgement)
    assert short.value.key == "read.rows-exact" and '"scrollback": 1000' in str(short.value).split("\n")[0]
    assert clauses.deviations().met == {"read.rows-exact@big-scrollback": 1}
    # with only the cap, the program goes on past it
    clauses.know(findings=["read.rows-exact@big-scrollback"])
    ctx, read, judgement = rows_context(rows=24, scrollback=9000, held=300, exact_below=1000)
    after_turn.rows_exact(ctx, read, judgement)


def test_a_known_finding_steers_away_from_its_own_cause_only(tmp_path: Path) -> None:
    g = gate(tmp_path)
    assert seen.claim(g.seen_dir, "send.text-literal@long-text", {})
    g.ignored = seen.claimed(g.seen_dir)
    # a long text holding `;` and `-` is cut short: met again; its `;` is no reason to stop drawing `;` edges
    long_cut = violation("send.text-literal", "cut", triggers=("dash-edge", "semicolon-edge"), causes=("long-text",))
    assert g._ignores(long_cut)
    assert seen.avoided(g.seen_dir) == frozenset()
    assert seen.claim(g.seen_dir, "send.text-literal@semicolon-edge", {})
    g.ignored = seen.claimed(g.seen_dir)
    lost = violation("send.text-literal", "lost ;", triggers=("semicolon-edge",))
    assert g._ignores(lost)
    # claimed by another worker, not reported yet: it may be given back (its shrunk program may name
    # another cause), and a campaign steered away from `;` for good would never meet the bug again
    # (an 8-minute campaign of issue 23 missed trailing-semicolon so)
    assert seen.avoided(g.seen_dir) == frozenset()
    g.done = {"send.text-literal@semicolon-edge"}  # reported: now it steers, its own cause only
    assert g._ignores(lost)
    assert seen.avoided(g.seen_dir) == {"semicolon-edge"}


# -- a list that shows pairs nobody launched here (the judge goes past them) ---------------------------

def test_a_known_list_of_other_sessions_pairs_is_noted_and_the_rest_checked() -> None:
    """Issues 23 and 38: a server whose list shows other sessions' terminals breaks the session scope
    in every program; once known, their rows are noted and left out, and the rest of the list is
    still held to the contract (a live pair it misses still ends the program)."""
    base = with_pair()
    other = entry("bash", "theirs", "/s/t")
    shows = out([entry("bash", "a", "/s/a"), other])
    with pytest.raises(ContractViolation) as unknown:
        judge(base, c("list"), shows)
    assert clause_of(unknown.value) == "scope.session"
    tolerant = replace(base, tolerated=frozenset({"scope.session"}))
    judged = judge(tolerant, c("list"), shows)
    assert [clause for clause, _ in judged.noted] == ["scope.session"] and "bash:'theirs'" in judged.noted[0][1]
    assert judged.model.pair("bash", "a") is not None and judged.model.pair("bash", "theirs") is None
    with pytest.raises(ContractViolation) as missing:  # the rest is checked as usual
        judge(tolerant, c("list"), out([other]))
    assert clause_of(missing.value) == "list.registered" and "misses the live pair" in str(missing.value)
    with pytest.raises(ContractViolation) as fields:
        judge(tolerant, c("list"), out([entry("bash", "a", "/s/wrong"), other]))
    assert clause_of(fields.value) == "list.fields"


def test_a_known_list_of_closed_pairs_is_noted_apart_from_other_sessions_rows() -> None:
    """A pair this session closed that stays listed (its row on the socket its launch reported) is
    list.registered, another bug than the scope's: knowing one does not go past the other."""
    closed = judge(with_pair(), c("close", terminal="bash", session="a"),
                   out({"terminal": "bash", "session": "a", "status": "closed"})).model
    stale = out([entry("bash", "a", "/s/a", running=False)])
    with pytest.raises(ContractViolation) as unknown:
        judge(replace(closed, tolerated=frozenset({"scope.session"})), c("list"), stale)
    assert clause_of(unknown.value) == "list.registered"
    judged = judge(replace(closed, tolerated=frozenset({"list.registered"})), c("list"), stale)
    assert judged.noted == (("list.registered", "list shows bash:a, which is not registered in this session"),)


def test_concurrent_calls_are_explained_by_an_order_that_needs_no_deviation_first() -> None:
    """A list in one reply with a launch that it shows: judged before the launch it would "show an
    unregistered pair"; the order that happened (launch, then list) needs no deviation and wins."""
    tolerant = replace(EMPTY, tolerated=frozenset({"list.registered"}))
    calls = [c("list"), c("launch", terminal="bash", session="a")]
    judged = judge_step(tolerant, calls, [out([entry("bash", "a", "/s/a")]), launched("bash", "a", "/s/a")])
    assert all(j.noted == () for j in judged) and judged[0].model.pair("bash", "a") is not None


def test_judging_goes_past_a_list_deviation_only_where_the_run_knows_it() -> None:
    """after_turn holds each noted row to deviate(): known (allowed, or a claimed finding of the
    clause with the same cause) it is counted; otherwise it fails as before."""
    shows = out([entry("bash", "theirs", "/s/t")])
    world, agent = world_with(FakeSession(lambda _call: json.loads(shows)))
    ctx = after_turn.TurnContext(world, agent, 1, [[c("list")]], [[shows]], {}, frozenset())
    with pytest.raises(ContractViolation) as unknown:
        after_turn.judge_outputs(ctx, 0)
    assert clause_of(unknown.value) == "scope.session"
    clauses.know(allowed=["scope.session"])
    after_turn.judge_outputs(ctx, 0)
    assert clauses.deviations().met == {"scope.session": 1}
    clauses.know(findings=["scope.session@server-terminals"])  # another cause: a new finding
    with pytest.raises(ContractViolation):
        after_turn.judge_outputs(ctx, 0)


def _goes_past(fault: str, target_kind: str, clause: str, program: list[str], at_least: int) -> None:
    """``program`` on a fresh ``target_kind`` target with ``fault`` on: it fails for ``clause`` while
    the run knows nothing, and runs to its end, going past ``clause`` ``at_least`` times, once the
    run allows it."""
    from stateful.machine import MachineConfig, TerminalMachine
    from stateful.minimize import replay_program
    from stateful.reference import faults
    from stateful.targets.registry import open_target

    with faults.activated(fault), open_target(target_kind) as target:
        machine = type("GoesPast", (TerminalMachine,), {})
        machine.bind(target, MachineConfig())
        failure = replay_program(machine, program)
        assert failure is not None and clause_of(failure) == clause, failure
        clauses.know(allowed=[clause])
        failure = replay_program(machine, program)
        assert failure is None, f"{type(failure).__name__}: {failure}"
        assert clauses.deviations().met[clause] >= at_least


def test_a_program_goes_on_past_a_stale_list_row_on_the_direct_target() -> None:
    """End to end: the planted closed-still-listed keeps a closed pair's row; once list.registered
    is known, the program lists, launches and lists again past it (and fails at once when not)."""
    _goes_past("closed-still-listed", "direct", "list.registered",
               ["pairs_0 = state.start(terminal='bash', name='main')", "state.close(pair=pairs_0, deco=Decoration())",
                "state.list_terminals(agent=0, deco=Decoration())",
                "pairs_1 = state.launch(agent=0, copies=1, terminal='sh', name='other', deco=Decoration())",
                "state.list_terminals(agent=0, deco=Decoration())"], at_least=2)


def test_a_program_goes_on_past_a_known_pagination_gap_on_the_sessions_target() -> None:
    """The planted items-page-gap loses items in small pages: the machine's items come in pages of
    1000, so once items.pagination is known the program goes on (and fails at once when not)."""
    _goes_past("items-page-gap", "sessions", "items.pagination",
               ["pairs_0 = state.start(terminal='bash', name='main')",
                *["state.list_terminals(agent=0, deco=Decoration())"] * 6,
                "pairs_1 = state.launch(agent=0, copies=1, terminal='sh', name='other', deco=Decoration())",
                *["state.list_terminals(agent=0, deco=Decoration())"] * 6], at_least=1)


def test_while_a_search_shrinks_its_finding_another_clause_is_rejected_not_claimed(tmp_path: Path) -> None:
    """ci12: Hypothesis's shrinker slipped from the finding it shrank to a program that failed
    another clause; the gate claimed that one, and the first was given back unreported and claimed
    again later by the same process. The other clause is left for a later search."""
    g = gate(tmp_path)
    assert not g._ignores(violation("read.rows-exact", "short"))
    assert g.shrinking and g.run_claims == {"read.rows-exact"}
    assert g._ignores(violation("list.order", "unsorted"))
    assert g.run_claims == {"read.rows-exact"} and seen.claimed(g.seen_dir) == {"read.rows-exact"}
    # the same clause by another cause is still the finding being shrunk (its cause may change)
    assert not g._ignores(violation("read.rows-exact", "short", causes=("big-scrollback",)))


def test_a_search_reports_the_finding_it_shrank_when_a_smaller_program_fails_another_clause(tmp_path: Path) -> None:
    """The same through Hypothesis: programs over 100 fail one clause, and once that is being shrunk,
    programs from 10 to 100 fail another. The search ends on the first, shrunk to its smallest
    program, and claims nothing else."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    g = gate(tmp_path)

    def program(n: int) -> None:
        if n > 100:
            fail("read.rows-exact", f"short at {n}")
        if g.shrinking and n >= 10:
            fail("list.order", f"unsorted at {n}")

    guarded = g._guard(program)

    @settings(database=None, derandomize=True, max_examples=500)
    @given(st.integers(0, 1000))
    def search(n: int) -> None:
        guarded(n)

    with pytest.raises(ContractViolation) as caught:
        search()
    assert clause_of(caught.value) == "read.rows-exact" and "short at 101" in str(caught.value)
    assert seen.claimed(g.seen_dir) == {"read.rows-exact"}
