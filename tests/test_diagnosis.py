"""What a failure says about a text that did not arrive, and how a report folds its polls."""

from __future__ import annotations

from typing import Any

import pytest

from stateful import checks
from stateful import world as machine_module
from stateful.world import Transcript
from stateful.model import Call

UID = "u1z3f"
MARKER = f"set +H; echo -E MK_$((6*7))_{UID}"
PROMPT = "user@host:~$ "


def screen(*rows: str) -> str:
    return "".join(row + "\n" for row in (*rows, *[""] * (24 - len(rows))))


def test_a_dropped_semicolon_is_named_with_the_send_that_lost_it() -> None:
    """The example of the issue: the `;` at the end of `set +H;` was dropped."""
    typed = MARKER + ";"
    shown = screen(PROMPT + "set +H echo -E MK_$((6*7))_" + UID, PROMPT.rstrip())
    clause, why = checks.diagnose_typed(shown, typed, ["set +H;", typed[7:]], UID)
    assert clause == "send.text-literal"
    assert "the `;` at the end of send 1's text `set +H;` was dropped" in why


def test_a_text_cut_short_says_how_much_arrived() -> None:
    typed = "echo " + "x" * 200 + "_" + UID
    echoed = (PROMPT + typed[:150])
    rows = [echoed[i:i + 80] for i in range(0, len(echoed), 80)]
    clause, why = checks.diagnose_typed(screen(*rows), typed, [typed], UID)
    assert clause == "send.text-literal"
    assert f"only the first 150 of the {len(typed)} characters typed arrived" in why


def test_a_command_typed_but_never_submitted_points_at_the_keys() -> None:
    clause, why = checks.diagnose_typed(screen(PROMPT + "python3 -q"), "python3 -q", ["python3 -q"], None)
    assert clause == "send.keys" and "never ran" in why


def test_a_command_that_ran_without_output_points_at_the_output() -> None:
    clause, _ = checks.diagnose_typed(screen(PROMPT + MARKER, PROMPT.rstrip()), MARKER, [MARKER], UID)
    assert clause == "read.output-shows"
    clause, why = checks.diagnose_typed(screen(PROMPT.rstrip()), MARKER, [MARKER], UID)
    assert clause == "read.output-shows" and "does not show the command" in why


def test_output_shown_without_a_prompt_after_it_is_no_text_cut_short() -> None:
    """A read that drops the screen's last row (the prompt) after a command whose echo scrolled into
    the history: the output row carries the marker id, and read as the echo it looked like a text
    that lost its start (a campaign with the pervasive fault read-last-row-dropped said so)."""
    cmd = f"seq -f 'SC%g' 1 60; echo -E MK_$((6*7))_{UID}"
    shown = "".join(f"SC{i}\n" for i in range(38, 61)) + f"MK_42_{UID}\n"
    clause, why = checks.diagnose_typed(shown, cmd, [cmd], UID)
    assert clause == "read.output-shows"
    assert "ran and its output showed" in why


def test_text_follows_a_command_that_wrapped_or_ended_at_the_pane_width() -> None:
    """The two screens of the ci runs: an echo of 81 columns wrapped inside its marker id, and one of
    exactly 80 columns followed by the prompt on the next row; and the screen before the prompt came."""
    echo = "bash-5.2# set +H; MANPAGER=less PAGER=less man ls || echo -E MK_$((6*7))_"
    assert checks.text_follows(screen(echo + "u11z63a", "7", "bash-5.2#"), "u11z63a7")
    assert checks.text_follows(screen(echo + "uaz7a4f", "bash-5.2#"), "uaz7a4f")
    assert not checks.text_follows(screen(echo + "uaz7a4f"), "uaz7a4f")
    assert not checks.text_follows(screen("LS(1)   User Commands   LS(1)"), "uaz7a4f")


def test_the_echo_is_found_across_wrapped_rows_and_continuation_prompts() -> None:
    long = "echo " + "y" * 100 + "_" + UID
    echoed = PROMPT + long
    rows = [echoed[i:i + 80] for i in range(0, len(echoed), 80)]
    assert checks.typed_echo(screen(*rows, PROMPT.rstrip()), long, UID) == (long, True)
    two = "echo 'a\nb'_" + UID
    assert checks.typed_echo(screen(PROMPT + "echo 'a", "> b'_" + UID), two, UID) == (two, False)


@pytest.mark.parametrize(("registered", "asked", "near"), [
    ("main", "mai", True), ("main", "mainx", True), ("main", "MAIN", True), ("main", " main ", True),
    ("main", "main", False), ("main", "other", False)])
def test_near_names(registered: str, asked: str, near: bool) -> None:
    assert checks.near_names(registered, asked) is near


def test_polls_that_see_nothing_new_are_folded_into_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    noted: list[Any] = []
    monkeypatch.setattr(machine_module, "note", noted.append)
    read = Call("sys_terminal_read", '{"terminal": "bash", "session": "a"}')
    transcript = Transcript()
    transcript.add(1, 0, [[read]], [["same"]])
    transcript.folding = True
    for number in range(2, 38):
        transcript.add(number, 0, [[read]], [["same"]])
    transcript.add(38, 0, [[read]], [["changed"]])
    transcript.folding = False
    transcript.flush()
    assert noted == [
        "turn 1 (agent 0): " + repr(read), f"  {read!r} -> 'same'",  # outputs quoted: data, never a step
        "  ... the same turn x 36 more, no change",
        "turn 38 (agent 0): " + repr(read), f"  {read!r} -> 'changed'",
    ]
    assert transcript.lines == noted  # kept for a violation that never comes back (stateful.run_record)


def test_a_semicolon_lost_in_the_last_line_of_a_heredoc_is_named() -> None:
    """Issue 23's ``unfinished`` rule: a heredoc's body is printed back between the lines typed, so
    the whole command is never shown as one echo; its last line (with the marker) still tells that
    the `;` at the end of a send was dropped (trailing-semicolon's hunt said output never showed)."""
    typed = "UF2\nUF_END\n" + MARKER
    chunks = ["UF2\nUF_END\nset +H;", MARKER[len("set +H;"):]]
    shown = screen(PROMPT + "cat <<'UF_END'", "> UF2", "> UF_END", " echo -E MK_$((6*7))_" + UID, "UF2",
                   PROMPT + "set +H echo -E MK_$((6*7))_" + UID, PROMPT.rstrip())
    clause, why = checks.diagnose_typed(shown, typed, chunks, UID)
    assert clause == "send.text-literal", why
    assert "`;`" in why and "last line of the 3 lines typed" in why
    assert checks.last_line_typed(typed, chunks) == (MARKER, ("set +H;", MARKER[len("set +H;"):]))
