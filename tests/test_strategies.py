"""Generation (stateful/strategies.py) and the marker/screen helpers (stateful/checks.py)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateful import checks
from stateful import strategies as gen
from stateful.model import Call, SessionModel, judge, resource_base_id

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(cmd=st.text(min_size=1, max_size=60), plan=gen.send_plans())
def test_split_command_types_the_command_once_then_submits(cmd: str, plan: gen.SendPlan) -> None:
    sends = gen.split_command(cmd, plan)
    typed = "".join(s.get("text") or "" for s in sends)
    presses = [s.get("keys", "Enter") for s in sends]
    if plan.finish == "newline":
        assert typed == cmd + "\n" and all(k == "" for k in presses)
    else:
        assert typed == cmd
        assert [k for k in presses if k] == (["C-m"] if plan.finish == "C-m" else ["Enter"])
        assert presses[-1] != ""
    assert all(s.get("text") != "" for s in sends[:-1])


def test_split_command_reaches_the_edges() -> None:
    cmd = "echo -E x; printf %s 'Enter\\;'"
    chunks = {s["text"] for i in range(12) for s in gen.split_command(cmd, gen.SendPlan((gen.Cut(True, i),)))}
    assert any(c.startswith("-") for c in chunks)
    assert any(c.endswith(";") for c in chunks)
    assert any(c.endswith("Enter") or c.startswith("Enter") for c in chunks)


@FAST
@given(args=st.dictionaries(st.sampled_from(sorted(gen.NAMED_KEYS)), st.text(max_size=5)), deco=gen.decorations())
def test_encode_keeps_the_arguments_and_adds_only_unnamed_keys(args: dict[str, str], deco: gen.Decoration) -> None:
    decoded = json.loads(gen.encode(args, deco))
    assert {k: decoded[k] for k in args} == args
    assert not (set(decoded) - set(args)) & gen.NAMED_KEYS


@FAST
@given(tool=st.sampled_from(sorted(gen.TOOL_KEYS)), deco=gen.decorations())
def test_extra_keys_of_a_tool_are_never_its_own_arguments(tool: str, deco: gen.Decoration) -> None:
    """Another tool's argument (``text`` on a read) is an extra key; the tool's own never is added,
    and the model agrees on which keys each tool names."""
    args = {"terminal": "bash", "session": "main"} if tool != "sys_terminal_list" else {}
    decoded = json.loads(gen.encode(args, deco, tool))
    assert {k: decoded[k] for k in args} == args
    assert not (set(decoded) - set(args)) & gen.TOOL_KEYS[tool]
    assert set(decoded) - set(args) == {k for k, _ in gen.extra_keys(deco, tool)} - set(args)


def test_tool_keys_are_the_models() -> None:
    from stateful.model import NAMED_KEYS as MODEL_KEYS

    assert {t: set(keys) for t, keys in gen.TOOL_KEYS.items()} == MODEL_KEYS


def test_contract_vocabulary_reaches_other_tools_as_extra_keys() -> None:
    deco = gen.Decoration(extra=tuple((k, 1) for k in gen.CONTRACT_VOCABULARY))
    assert {k for k, _ in gen.extra_keys(deco, "sys_terminal_read")} == set(gen.CONTRACT_VOCABULARY) - {
        "terminal", "session", "scrollback"}
    assert {k for k, _ in gen.extra_keys(deco, "sys_terminal_list")} == set(gen.CONTRACT_VOCABULARY)


def test_text_kinds_name_each_class_of_edge() -> None:
    assert gen.text_kinds("Enter") == ("a key name alone",)
    assert gen.text_kinds("-l") == ("tmux syntax alone (-l)",)
    assert gen.text_kinds("echo C-c x") == ("spells a key name",)
    for name, chars in gen.UNICODE_TEXTS.items():
        assert gen.text_kinds(f"x{chars}y") == (f"unicode {name}",)
    assert gen.text_kinds("plain") == ()


@FAST
@given(bad=gen.bad_calls(), name=gen.session_names())
def test_bad_calls_are_errors_for_the_model(bad: gen.BadCall, name: str) -> None:
    """Whatever a bad call targets, the model expects an error (never a state change)."""
    model = SessionModel(declared=("bash", "sh"))
    raw = gen.bad_arguments(bad, "bash", name)
    expected_any_error = '{"error": "x"}'
    call = Call(bad.tool, raw)
    if bad.tool == "sys_terminal_list":
        # a malformed string may be read as {} by a harness: then the list is the answer
        judge(model, call, '{"error": "malformed JSON arguments"}' if bad.raw not in gen.NON_OBJECT
              else '{"error": "arguments must be a JSON object"}')
        return
    try:
        j = judge(model, call, expected_any_error)
    except AssertionError:
        return  # a specific error string is required: fine, it is an error
    assert j.model == model


@settings(max_examples=40, deadline=None)
@given(payload=gen.payloads())
def test_shell_payload_command_prints_the_md5_token(payload: str) -> None:
    cmd, token = checks.shell_payload("u1", payload)
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", cmd], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == token
    assert token not in cmd


@settings(max_examples=40, deadline=None)
@given(payload=gen.payloads())
def test_python_payload_command_prints_the_md5_token(payload: str) -> None:
    cmd, token = checks.python_payload("u1", payload)
    assert "\n" not in cmd  # one REPL line
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(cmd, {})  # noqa: S102 - our own generated print() expression
    assert buffer.getvalue().strip() == token
    assert token not in cmd


def test_markers_prove_output_not_the_typed_line() -> None:
    for cmd, token in (checks.shell_marker("u9"), checks.python_marker("u9")):
        assert token not in cmd
        assert not checks.tokens_in(cmd)
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", checks.shell_marker("u9", semicolon=True)[0]],
                         capture_output=True, text=True, check=True).stdout
    assert checks.tokens_in(out) == [("MK_42_u9", "u9")]


def test_tokens_are_exact() -> None:
    screen = "MK_42_u12\nxMK_42_u1\nH_" + "a" * 32 + "_u3\nRP_42_u4 \n"
    assert checks.tokens_in(screen) == [("MK_42_u12", "u12"), ("H_" + "a" * 32 + "_u3", "u3"), ("RP_42_u4", "u4")]
    assert checks.has_token(screen, "MK_42_u12") and not checks.has_token(screen, "MK_42_u1")


def test_prompt_follows_and_last_row() -> None:
    assert checks.prompt_follows("$ echo\nMK_42_u1\n$ \n\n", "MK_42_u1")
    assert not checks.prompt_follows("$ echo\nMK_42_u1\n\n\n", "MK_42_u1")
    assert checks.last_row(">>> 1\n1\n>>> \n\n") == ">>>"
    assert checks.rows_after(">>> exit()\n$ \n", ">>> exit()") == ["$", ""]


def test_view_problem() -> None:
    ids = {("bash", "a"): "terminal_bash_a"}
    good = [{"id": "terminal_bash_a", "terminal": "bash", "session": "a"}]
    assert checks.view_problem(good, [("bash", "a")], ids) is None
    assert checks.view_problem([{"id": "terminal_bash_a"}], [("bash", "a")], ids) is None
    assert checks.view_problem([], [("bash", "a")], ids)
    assert checks.view_problem(good + good, [("bash", "a")], ids)
    assert checks.view_problem([{"id": "x", "terminal": "bash", "session": "a"}], [("bash", "a")], ids)
    assert checks.view_problem([{"id": "t", "terminal": "tui", "session": "m"}, *good], [("bash", "a")], ids,
                               baseline=[("tui", "m")]) is None


def test_view_problem_names_each_pair_of_a_shared_id_once() -> None:
    """Past a known events.unique-ids two live pairs share one id (omnigent 0.19.1: 'a'b' and 'a'b!' are both
    terminal_bash_a_b); a view that names its entries by id alone shows each of them once. The check took
    both entries for the last pair and said it was shown twice (a false alarm of a campaign, 2026-12-07)."""
    ids = {("bash", "a'b"): "terminal_bash_a_b", ("bash", "a'b!"): "terminal_bash_a_b"}
    both = [{"id": "terminal_bash_a_b"}, {"id": "terminal_bash_a_b"}]
    assert checks.view_problem(both, [("bash", "a'b"), ("bash", "a'b!")], ids) is None
    assert "twice" in str(checks.view_problem([*both, *both[:1]], [("bash", "a'b"), ("bash", "a'b!")], ids))
    assert checks.view_problem(both[:1], [("bash", "a'b"), ("bash", "a'b!")], ids)  # one of them is missing


def test_view_problem_holds_every_entry_against_the_model() -> None:
    """Only running pairs and the server's own terminals (the baseline) may be shown: a closed
    terminal that stays, by name or by id, is caught even when the server has terminals of its own."""
    ids = {("bash", "a"): "terminal_bash_a"}
    good = [{"id": "terminal_bash_a"}]
    baseline_id = [{"id": "terminal_tui_main"}]
    fits = lambda rid: rid == "terminal_tui_main"  # noqa: E731
    assert checks.view_problem(baseline_id + good, [("bash", "a")], ids, [("tui", "main")], fits) is None
    closed_by_id = [{"id": "terminal_bash_gone"}]
    assert "no running terminal" in checks.view_problem(closed_by_id + good, [("bash", "a")], ids, [("tui", "main")], fits)
    closed_by_name = [{"id": "terminal_bash_b", "terminal": "bash", "session": "b"}]
    assert "not running in this session" in checks.view_problem(closed_by_name + good, [("bash", "a")], ids,
                                                                [("tui", "main")], fits)


@FAST
@given(name=gen.session_names())
def test_session_names_are_valid(name: str) -> None:
    assert isinstance(name, str) and name


@FAST
@given(payload=gen.payloads(), mode=st.sampled_from(("shell", "python")))
def test_payload_end_is_right_after_the_literal(payload: str, mode: str) -> None:
    cmd = (checks.shell_payload if mode == "shell" else checks.python_payload)("u1", payload)[0]
    end = checks.payload_end(mode, payload)
    assert cmd[end:].startswith(" | md5sum" if mode == "shell" else ".encode()")


def test_prompt_after_interrupt() -> None:
    assert checks.interrupts("$ ^C\n$ ^C\n$ \n") == 2
    assert checks.prompt_after_interrupt("$ ^C\n$ \n", 0)
    assert not checks.prompt_after_interrupt("$ ^C\n\n", 0)
    assert not checks.prompt_after_interrupt("$ ^C\n$ \n", 1)
    assert checks.prompt_after_interrupt(">>>\nKeyboardInterrupt\n>>>\n", 0)


@FAST
@given(values=st.tuples(gen.decorations(), gen.send_plans(), gen.bad_calls(), gen.long_payloads()))
def test_rule_arguments_print_on_one_line_as_python(values: tuple[object, ...]) -> None:
    """Each step of a reported program is one line that evaluates back to the same arguments."""
    from hypothesis.vendor import pretty

    namespace = {"Decoration": gen.Decoration, "SendPlan": gen.SendPlan, "Cut": gen.Cut,
                 "BadCall": gen.BadCall, "LongText": gen.LongText}
    for value in values:
        text = pretty.pretty(value)
        assert "\n" not in text
        assert eval(text, namespace) == value  # noqa: S307 - our own reprs


@FAST
@given(gen.session_names(), st.sampled_from(gen.ID_SIBLINGS))
def test_id_sibling_is_another_key_with_the_same_resource_id(name: str, how: str) -> None:
    sibling = gen.id_sibling(name, how)
    assert sibling != name
    assert resource_base_id("bash", sibling) == resource_base_id("bash", name)


def test_id_siblings_of_a_pool_name() -> None:
    assert [gen.id_sibling("a b", how) for how in gen.ID_SIBLINGS] == [" a b ", "_a b_", "a b!", "a:b"]
    assert gen.id_sibling("a:b", "swapped") == "a;b" and gen.id_sibling("main", "swapped") == "#main#"


def test_marker_ids_are_as_long_in_every_program_so_cuts_replay_at_the_same_place() -> None:
    """A cut is drawn as an index into the command, which holds a marker id: an id one digit longer
    in Hypothesis's replay moved the cut (issue 23: trailing-semicolon's hunt ended as flaky)."""
    ids = [checks.new_uid() for _ in range(300)]  # across 0xff -> 0x100 wherever the counter stands
    assert len(set(ids)) == len(ids) and len({len(u) for u in ids}) == 1
    plan = gen.SendPlan(cuts=(gen.Cut(False, 7777), gen.Cut(True, 3)))
    chunks = [[len(str(s.get("text") or "")) for s in gen.split_command(checks.shell_marker(u)[0], plan)] for u in ids]
    assert all(c == chunks[0] for c in chunks)
