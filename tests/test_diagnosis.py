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


def test_a_marker_printed_cut_short_is_a_text_that_lost_its_end_known_at_once() -> None:
    """Issue 38, a server that loses every text's last character: the marker command ran but printed
    its id without its end. That is final (the whole marker can never show), whatever the screen
    shows of the echo (a flood scrolls it away). A token that a full-width row breaks, or one that
    is not alone on its row, is no such evidence."""
    uid = "u00000ezc959"
    cut = "MK_42_" + uid[:-1]
    assert checks.cut_tokens(screen("y", cut, PROMPT.rstrip()), uid) == [cut]
    clause, why = checks.diagnose_typed(screen("y", cut, PROMPT.rstrip()), f"set +H; echo -E MK_$((6*7))_{uid}",
                                        [f"set +H; echo -E MK_$((6*7))_{uid}"], uid)
    assert clause == "send.text-literal" and "without its last 1 character(s): the end of the text was lost" in why
    wrapped = "x" * (80 - len(cut)) + cut
    assert checks.cut_tokens(screen(wrapped, uid[-1:]), uid) == []
    assert checks.cut_tokens(screen("said " + cut), uid) == []
    assert checks.cut_tokens(screen("MK_42_" + uid), uid) == []


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


def as_captured(line: str) -> list[str]:
    """A line as a read shows it: wrapped into rows of the pane's width, each without its trailing
    spaces (tmux's capture-pane trims them)."""
    return [line[i:i + checks.WRAP_COLUMNS].rstrip(" ") for i in range(0, len(line), checks.WRAP_COLUMNS)]


REAL_UID = "u000001zab12"
C_LOCALE = f"set +H; LC_ALL=C printf '%s\\n' -; echo H_$(printf %s - | md5sum | cut -c1-32)_{REAL_UID}"


def test_a_command_wrapped_where_a_space_fell_is_shown_as_typed() -> None:
    """stop 31's false alarm, as far as it can be rebuilt: the space in the last column of a wrapped
    echo is trimmed from its row, so the row is 79 columns and was not joined to the next; the line
    with the marker id was taken for the whole echo, and the printf's output that came before the
    marker's (a non-blank row after it) for a program gone on without the text's start."""
    prompt = "bash-5.2$ "
    at = C_LOCALE.index(" ", checks.WRAP_COLUMNS - len(prompt) - 5)
    prompt = "x" * (checks.WRAP_COLUMNS - 1 - at) + "$ "  # the space falls in the last column
    line = prompt + C_LOCALE
    assert line[checks.WRAP_COLUMNS - 1] == " "
    rows = as_captured(line)
    assert len(rows[0]) == checks.WRAP_COLUMNS - 1  # what logical_lines cannot rejoin
    shown = screen(*rows, "-")  # the printf ran, the marker's pipeline has not printed yet
    assert checks.typed_echo(shown, C_LOCALE, REAL_UID, by_uid_only=True) == (C_LOCALE, True)
    clause, why = checks.diagnose_typed(screen(*rows), C_LOCALE, [C_LOCALE], REAL_UID)
    assert clause == "send.keys", why  # it arrived as written, and never ran


def test_text_typed_ahead_and_echoed_twice_on_one_row_arrived_as_written() -> None:
    """A fresh shell that starts reading late: the kernel echoes the text typed ahead, the shell
    prints its prompt after it, then echoes the same text again. The last copy is the command."""
    rows = as_captured(MARKER[:12] + "bash-5.2$ " + MARKER)
    assert checks.typed_echo(screen(*rows), MARKER, UID, by_uid_only=True) == (MARKER, False)
    assert checks.diagnose_typed(screen(*rows), MARKER, [MARKER[:12], MARKER[12:]], UID)[0] == "send.keys"
    full = MARKER + "bash-5.2$ " + MARKER  # a text over several sends: the shell's echo follows a partial kernel echo
    assert checks.typed_echo(screen(full[:80], full[80:]), MARKER, UID) == (MARKER, False)


def test_a_row_of_exactly_the_pane_width_followed_by_output_is_not_one_line() -> None:
    cmd = f"seq -f 'SC%g' 1 60; echo -E MK_$((6*7))_{REAL_UID}"
    prompt = "p" * (checks.WRAP_COLUMNS - len(cmd) - 2) + "$ "
    assert len(prompt + cmd) == checks.WRAP_COLUMNS
    assert checks.typed_echo(screen(prompt + cmd, "SC1", "SC2"), cmd, REAL_UID, by_uid_only=True) == (cmd, True)


def test_a_time_out_never_blames_the_text_for_an_earlier_commands_line() -> None:
    """No line shows this command: the last line that shows its start (``set +H``) is an earlier
    marker's, whose own id differs. That is a command the screen does not show, not one changed."""
    earlier = MARKER.replace(UID, "u0000a0zab12")
    shown = screen(PROMPT + earlier, "MK_42_u0000a0zab12", PROMPT.rstrip())
    clause, why = checks.diagnose_typed(shown, MARKER.replace(UID, REAL_UID), [MARKER], REAL_UID)
    assert clause == "read.output-shows" and "does not show the command" in why


def test_what_a_server_really_lost_is_still_named() -> None:
    """The shapes above must not hide a text that did not arrive: a `;` dropped at a cut, a text
    whose start was lost, one changed in its middle (each shown on one row, or wrapped)."""
    semicolon = C_LOCALE.replace("printf '%s\\n' -;", "printf '%s\\n' -")
    assert checks.diagnose_typed(screen(*as_captured(PROMPT + semicolon), "-", "x"), C_LOCALE, [C_LOCALE],
                                 REAL_UID)[0] == "send.text-literal"
    lost_start = screen(PROMPT + C_LOCALE[9:], "-")
    echo = checks.typed_echo(lost_start, C_LOCALE, REAL_UID, by_uid_only=True)
    assert echo is not None and echo[1] and not C_LOCALE.startswith(echo[0])  # the plain check's verdict
    changed = C_LOCALE.replace("md5sum", "md5sun")
    echo = checks.typed_echo(screen(*as_captured(PROMPT + changed), "-"), C_LOCALE, REAL_UID, by_uid_only=True)
    assert echo is not None and echo[0] != C_LOCALE and not C_LOCALE.startswith(echo[0])


def test_an_echo_without_its_zero_width_joiner_is_no_text_that_did_not_arrive() -> None:
    """What tmux showed of `printf %s 'a<ZWSP>b<ZWJ>'` typed into bash (checked by hand): the zero-width
    joiner is not in the capture, although the shell got it (its digest was right). A time-out's
    diagnosis must not say it was dropped (ci10: a campaign's false send.text-literal)."""
    typed = "echo H_$(printf %s 'a\u200bb\u200d' | md5sum | cut -c1-32)_" + REAL_UID
    shown = screen(PROMPT + typed.replace("\u200d", ""), PROMPT.rstrip())
    clause, why = checks.diagnose_typed(shown, typed, [typed], REAL_UID)
    assert clause == "read.output-shows", why
    lost = screen(PROMPT + typed.replace("\u200bb", "\u200b"), PROMPT.rstrip())  # a visible character lost: named
    assert checks.diagnose_typed(lost, typed, [typed], REAL_UID)[0] == "send.text-literal"


def test_an_output_row_overwritten_after_a_zero_width_joiner_still_shows_its_token() -> None:
    """ci10: tmux 3.3a draws the character after a zero-width joiner one cell narrower than readline
    counts, and readline's redraw overwrote the end of the output row with the rest of the typed
    command. The token is there, followed by letters: an id of the tester's fixed shape counts."""
    uid = "u000237z37fe"
    command, token = checks.shell_payload(uid, "a\u200bb\u200d")
    shown = screen(PROMPT + command, token + "5sum | cut -c1-32)_" + uid, PROMPT.rstrip())
    assert checks.has_token(shown, token) and checks.prompt_follows(shown, token)
    assert checks.tokens_in(shown) == [(token, uid)]
    # an id of another shape still needs its end: MK_42_u9 is not MK_42_u9x
    assert not checks.has_token("MK_42_u9x\n", "MK_42_u9")
