"""The contract's clauses as first-class names: a stable id, the section, one line of the rule.

Every violation the machine raises names exactly one clause. Each clause has its own exception type
(a subclass of :class:`ContractViolation`), so that Hypothesis's distinct-failure key (the exception
type and where it was raised) separates different bugs, and a campaign can tell them apart by id.
The message of a violation starts with one plain line: the clause id, then what was called, what the
contract expected and what came back; details follow on the next lines.

``python -m stateful clauses`` lists them.

A clause whose check knows how to keep the model exact past a violation says so (``goes_on``): in a
run that knows the failure already (a campaign's allowed and claimed findings, ``pytest stateful/
--allow``), such a check records the deviation (:func:`deviate`) and the program goes on; every other
violation ends the program as it always did. A violation met after the program went on past others
names them (``behind``): its replays (and its repro) go on past the same ones (:func:`going_past`),
or they would stop at those and never meet it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NoReturn

from stateful import causes as causes_

__all__ = ["CLAUSES", "Clause", "ContractViolation", "Deviations", "clause", "violation", "fail", "clause_of",
           "deviate", "know", "deviations", "tolerated", "GOES_ON", "program_started", "going_past", "behind_of"]


class ContractViolation(AssertionError):
    """An observed behaviour that the contract forbids. ``clause`` names the broken clause; the
    message starts with it."""

    clause: str = ""
    triggers: tuple[str, ...] = ()
    """The inputs that provoked it, where one did (:mod:`stateful.steering`): a campaign that knows
    this violation stops drawing them."""
    causes: tuple[str, ...] = ()
    """What its program needs to fail (:mod:`stateful.causes`, the triggers among them): with the
    clause, the failure's identity (:meth:`key`)."""
    behind: tuple[str, ...] = ()
    """The known violations (allowed clause ids, finding keys) its program went on past before it:
    a replay that does not go past them too stops there (a finding behind another, docs/campaigns.md)."""

    @property
    def key(self) -> str:
        """The finding this violation is: its clause, and its primary cause if it names one."""
        return causes_.finding_key(self.clause, self.causes)


@dataclass(frozen=True)
class Clause:
    id: str
    section: str
    rule: str
    violation: type[ContractViolation]
    goes_on: str = ""
    """How a program goes on past a known violation of it ("": it cannot, the program ends)."""


CLAUSES: dict[str, Clause] = {}


def _type_name(clause_id: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[.\-]", clause_id)) + "Violation"


def _clause(clause_id: str, section: str, rule: str) -> None:
    name = _type_name(clause_id)
    kind = type(name, (ContractViolation,), {"clause": clause_id, "__module__": __name__,
                                             "__doc__": f"{section}: {rule}"})
    globals()[name] = kind  # importable by name, so a violation pickles across processes
    CLAUSES[clause_id] = Clause(clause_id, section, rule, kind)


# -- §1 every tool: arguments and output -----------------------------------------------------------
_clause("output.json", "§1", "every tool returns a string holding JSON")
_clause("args.not-object", "§1", "arguments that are not a JSON object give the not-an-object error")
_clause("args.malformed", "§1", "empty or unparsable arguments give the malformed error (or what {} gives)")
_clause("args.terminal", "§1", "a missing, non-string or empty 'terminal' gives the terminal error")
_clause("args.session", "§1", "a missing, non-string or empty 'session' gives the session error")
_clause("args.extra-keys", "§1", "keys not named are ignored by every tool: an extra key never changes what it does")
_clause("scope.session", "§1", "a session never sees, reads, types into or closes another session's terminals")
_clause("scope.server-terminals", "§1", "a terminal the server runs for its own purposes (undeclared) is never "
        "addressable: launch, send, read and close answer as for any undeclared pair")
_clause("scope.names-exact", "§1", "names are dictionary keys, never matched like tmux targets or prefixes")
# -- §1 launch ------------------------------------------------------------------------------------
_clause("launch.unknown-terminal", "§1 launch", "an undeclared terminal gives the unknown-terminal error")
_clause("launch.override-refused", "§1 launch", "cwd/sandbox overrides are refused unless the spec allows them")
_clause("launch.result", "§1 launch", "success is {terminal, session, tmux_socket, has_os_env: true, status}")
_clause("launch.one-launched", "§1 launch", "a pair that is not registered is launched (a new process)")
_clause("launch.already-running", "§1 launch", "a live pair says already_running")
_clause("launch.socket-kept", "§1 launch", "already_running gives the pair's tmux_socket unchanged")
_clause("launch.relaunch", "§1 launch", "a registered pair whose process exited is launched again")
_clause("launch.private-server", "§1 launch", "each live terminal has its own private tmux server")
_clause("launch.server-runs", "§1 launch", "while the terminal lives, its tmux server runs and holds its pane")
# -- §1 send --------------------------------------------------------------------------------------
_clause("send.not-found", "§1 send", "an unregistered or undeclared pair gives the not-found error")
_clause("send.types", "§1 send", "a non-string text or keys gives its type error")
_clause("send.sent", "§1 send", "a send to a live pair says sent")
_clause("send.dead", "§1 send", "a send to an exited pair gives the not-found or no-longer-running error")
_clause("send.text-literal", "§1 send", "text is typed literally: every character arrives as written")
_clause("send.keys", "§1 send", "keys are pressed in order; absent means Enter, '' none")
# -- §1 read --------------------------------------------------------------------------------------
_clause("read.not-found", "§1 read", "an unregistered or undeclared pair gives the not-found error")
_clause("read.scrollback-type", "§1 read", "a scrollback that is not a non-negative integer gives its error")
_clause("read.dead", "§1 read", "a read of an exited pair gives the not-found or no-longer-running error")
_clause("read.result", "§1 read", "success is {terminal: 'T:S', screen, scrollback_lines}: plain text rows of "
        "at most 80 columns, each ending in \\n")
_clause("read.rows-exact", "§1 read", "a read holds exactly min(N, H) + 24 rows")
_clause("read.history", "§1 read", "output that scrolled out is found again with a large enough scrollback")
_clause("read.visible", "§1 read", "scrollback 0 shows the visible rows: the last output, not old output")
_clause("read.output-shows", "§1 read", "repeated reads show a program's output within a bounded time")
_clause("screen.isolation", "§1", "what is typed into one pair never shows in another pair's screen")
# -- §1 list --------------------------------------------------------------------------------------
_clause("list.result", "§1 list", "list returns an array of {terminal, session, command, running, has_os_env, "
        "tmux_socket}")
_clause("list.unique", "§1 list", "list shows one entry per registered pair: no pair twice")
_clause("list.baseline", "§1 list", "the server's own terminals (the first list) come first and stay")
_clause("list.registered", "§1 list", "list shows exactly this session's registered pairs: a pair appears at "
        "launched, disappears at close")
_clause("list.order", "§1 list", "pairs are listed in launch order")
_clause("list.fields", "§1 list", "an entry agrees with its launch: tmux_socket, has_os_env, command")
_clause("list.running", "§1 list", "an entry's running agrees with the pair's life: true while it lives, never true "
        "once a tool reported it dead")
_clause("list.exit-removed", "§1 list", "a pair whose process exited is removed within 2 s")
# -- §1 close -------------------------------------------------------------------------------------
_clause("close.closed", "§1 close", "a registered pair (alive or dead) is closed")
_clause("close.not-found", "§1 close", "an unregistered pair gives not_found, never an error")
_clause("close.nothing-left", "§1 launch", "after close returns, the tmux server and every process are gone")
# -- §4 several calls in one reply ------------------------------------------------------------------
_clause("step.concurrent", "§4", "calls of one reply run concurrently: some sequential order explains "
        "their outputs (one launch of concurrent launches)")
# -- §2 sessions API --------------------------------------------------------------------------------
_clause("api.status", "§2", "each route answers with the status and shape §2 gives it (201 register, 200 bind and "
        "reads, 202 message, 2xx DELETE)")
_clause("items.pagination", "§2.7", "following after=last_id while has_more yields every item once, in order")
_clause("items.calls", "§2.7", "each call has one function_call item (its name, its arguments) and one "
        "function_call_output")
_clause("view.terminals", "§2.8", "/resources/terminals shows the session's running terminals, nothing else")
_clause("session.delete", "§2.9", "DELETE closes all of the session's terminals")
# -- §2.4 resource events ---------------------------------------------------------------------------
_clause("events.recorded", "§2.4", "each launched records one created event, each closed or exit one deleted")
_clause("events.ids", "§2.4", "a resource id is terminal_<safe(name)>_<safe(key)>[_n]")
_clause("events.unique-ids", "§2.4", "two live terminals of a session never share a resource id")


GOES_ON: dict[str, str] = {
    "read.rows-exact": "the row count is not part of the model's state: noted, the read's screen is used as it is "
                       "(past a read over 1000, the read of 1000 made to tell its cause is judged in its place)",
    "read.visible": "what a screen shows is not part of the model's state: noted, the program goes on",
    "read.history": "what a screen shows is not part of the model's state: noted, the program goes on",
    "screen.isolation": "noted; the pair that showed another's marker is checked as before",
    "view.terminals": "the second view is not part of the model's state: noted, the rest checked as usual",
    "send.text-literal": "the shell's state is unknown: it is resynchronised (interrupted, a fresh marker "
                         "awaited), or the pair is closed and launched again",
    "items.pagination": "the items the machine judges are fetched in pages of 1000; a walk in small pages that "
                        "loses or repeats items (or whose first_id/last_id are not a page's ends) is noted and the "
                        "program goes on with those (a page that is no page, or an empty one that says has_more, "
                        "still ends it)",
    "events.unique-ids": "a created event whose resource id is already a live terminal's is noted and taken as the "
                         "new terminal's; a later deleted event with that id may then be either's",
    "list.registered": "a row of a pair this session closed (on a tmux server one of its launches reported) is noted "
                       "and left out; the rest of the list is checked as usual (a live pair missing still ends it)",
    "list.unique": "a second entry of a pair on the same tmux server as its first is noted and left out; the rest of "
                   "the list is checked as usual",
    "list.running": "noted; the pair's life in the model stays what the tools said (alive, or dead), and the rest "
                    "of the entry and of the list is checked as usual",
    "launch.socket-kept": "noted; the pair keeps the tmux_socket its launch reported (the one the probe and every "
                          "later check use)",
    "close.nothing-left": "noted; the model has the pair closed, as close said, and what is left of it is the "
                          "server's (never killed by the tester); the program goes on",
    "session.delete": "noted; the model has the session's pairs closed, as the DELETE said, and what is left of "
                      "them is the server's; the program goes on",
    "scope.session": "a list row of another session's terminal (a declared terminal on a tmux server no launch of "
                     "this session reported), in the first list or any later one, is noted and left out of the model: "
                     "never typed into or closed; the rest of the list is checked as usual (a call that reaches "
                     "another session's terminal still ends the program)",
}
"""The clauses a program can go on past once their violation is known, and how (docs/campaigns.md)."""
for _id, _how in GOES_ON.items():
    CLAUSES[_id] = Clause(CLAUSES[_id].id, CLAUSES[_id].section, CLAUSES[_id].rule, CLAUSES[_id].violation, _how)


def clause(clause_id: str) -> Clause:
    """The clause named ``clause_id`` (a typo is a programming error)."""
    return CLAUSES[clause_id]


def violation(clause_id: str, headline: str, *details: str, triggers: tuple[str, ...] = (),
              causes: Iterable[str] = ()) -> ContractViolation:
    """The violation of ``clause_id``: ``"<id>: <headline>"`` on the first line, then ``details``;
    its causes are ``causes`` and ``triggers``."""
    kind = CLAUSES[clause_id].violation
    first = " ".join(headline.split("\n"))
    error = kind("\n".join([f"{clause_id}: {first}", *details]))
    if triggers:
        error.triggers = tuple(triggers)
    named = causes_.ordered({*causes, *triggers})
    if named:
        error.causes = named
    if _run.passed:
        error.behind = tuple(sorted(_run.passed))
    return error


def clause_of(error: BaseException) -> str | None:
    """The clause a failure names (None for what is not a contract violation)."""
    return getattr(error, "clause", None) or None if isinstance(error, ContractViolation) else None


def fail(clause_id: str, headline: str, *details: str, triggers: tuple[str, ...] = (),
         causes: Iterable[str] = ()) -> NoReturn:
    """Raise the violation of ``clause_id``. Every violation is raised by this one line (and never
    while another exception is being handled), so that Hypothesis, which tells failures apart by
    exception type and raise site, tells them apart by clause alone: the same bug seen by two
    checks is one failure, and a replay that meets it elsewhere is not "inconsistent"."""
    raise violation(clause_id, headline, *details, triggers=triggers, causes=causes)


@dataclass
class Deviations:
    """What one run knows already, and the known violations it went on past."""

    allowed: frozenset[str] = frozenset()
    """Clause ids known whatever the cause (``--allow``, a deviations file)."""
    findings: frozenset[str] = frozenset()
    """Finding keys known (claimed in a campaign): ``clause`` or ``clause@cause``."""
    met: Counter[str] = field(default_factory=Counter)
    """Per clause id (allowed) or finding key (claimed): how often a program went on past it."""
    examples: dict[str, ContractViolation] = field(default_factory=dict)
    """The first violation of each, for the report."""
    passed: set[str] = field(default_factory=set)
    """The keys of :attr:`met` that the current program went on past (:func:`program_started`)."""

    def gone_past(self, clause_id: str) -> int:
        """How often the run went past a violation of ``clause_id`` (whatever its cause)."""
        return sum(n for key, n in self.met.items() if causes_.split_key(key)[0] == clause_id)

    def known(self, error: ContractViolation) -> str | None:
        """The allowed clause or known finding ``error`` is (None: it is new)."""
        if error.clause in self.allowed:
            return error.clause
        return causes_.known_by(error.clause, error.causes, self.findings)


_run = Deviations()


def know(allowed: Iterable[str] = (), findings: Iterable[str] = ()) -> None:
    """Set what the run knows from now on, and start counting afresh (a campaign's gate before
    each program; ``pytest stateful/ --allow`` once)."""
    global _run
    _run = Deviations(frozenset(allowed), frozenset(findings))


def program_started() -> None:
    """A new program begins (the machine's ``__init__``): what it goes on past is its own."""
    _run.passed.clear()


def behind_of(error: BaseException) -> tuple[str, ...]:
    """The known violations the program of ``error`` went on past before it (none for anything else)."""
    return tuple(getattr(error, "behind", ())) if isinstance(error, ContractViolation) else ()


@contextmanager
def going_past(keys: Iterable[str]) -> Iterator[None]:
    """Within: the run also knows ``keys`` (a failure's ``behind``: a clause id is known whatever its
    cause, a ``clause@cause`` key as that finding), so that a replay of a program that went on past
    them goes on past them again; what the run knew before is restored on exit."""
    global _run
    keys = tuple(keys)
    before = _run
    know({*before.allowed, *(k for k in keys if "@" not in k)}, {*before.findings, *(k for k in keys if "@" in k)})
    try:
        yield
    finally:
        _run = before


def tolerated(clause_ids: Iterable[str]) -> frozenset[str]:
    """Those of ``clause_ids`` that the run knows in some form (allowed, or a finding of the clause
    claimed): where the model can, it notes their violations instead of raising, and the caller
    holds each to :func:`deviate`, which fails it unless it is that known finding (its cause too)."""
    known = {causes_.split_key(k)[0] for k in _run.findings} | set(_run.allowed)
    return frozenset(c for c in clause_ids if c in known)


def deviations() -> Deviations:
    """What the run knows, and what it went on past since :func:`know`."""
    return _run


def deviate(clause_id: str, headline: str, *details: str, triggers: tuple[str, ...] = (),
            causes: Iterable[str] = ()) -> None:
    """:func:`fail`, unless the run knows this violation already: then it is recorded (counted,
    the first kept) and this returns, and the caller goes on as ``CLAUSES[clause_id].goes_on``
    says. Only checks that know how to keep the model exact past the violation call this."""
    assert CLAUSES[clause_id].goes_on, f"{clause_id} declares no way to go on"
    error = violation(clause_id, headline, *details, triggers=triggers, causes=causes)
    key = _run.known(error)
    if key is None:
        fail(clause_id, headline, *details, triggers=triggers, causes=causes)
    _run.met[key] += 1
    _run.passed.add(key)
    _run.examples.setdefault(key, error)
