"""The clause registry (stateful/clauses.py): one exception type per clause, named in every message."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stateful.clauses import CLAUSES, ContractViolation, clause_of, fail, violation

ROOT = Path(__file__).resolve().parent.parent
CLAUSE_ID = re.compile(r"""["']((?:args|scope|launch|send|read|screen|list|close|step|api|items|view|session|events|output)\.[a-z-]+)["']""")


def test_each_clause_has_its_own_violation_type() -> None:
    kinds = [clause.violation for clause in CLAUSES.values()]
    assert len(set(kinds)) == len(kinds)
    assert all(issubclass(kind, ContractViolation) and kind.clause == cid for cid, kind in
               ((c.id, c.violation) for c in CLAUSES.values()))


def test_a_violation_starts_with_its_clause_and_one_plain_line() -> None:
    error = violation("send.text-literal", "the `;`\nwas dropped", "  details")
    assert str(error).split("\n") == ["send.text-literal: the `;` was dropped", "  details"]
    assert clause_of(error) == "send.text-literal" and clause_of(ValueError()) is None
    again = pickle.loads(pickle.dumps(error))  # a campaign's workers hand failures to their parent
    assert type(again) is type(error) and str(again) == str(error)


def test_fail_raises_the_clause_type_and_refuses_unknown_ids() -> None:
    with pytest.raises(CLAUSES["read.rows-exact"].violation, match=r"^read\.rows-exact: 3 rows"):
        fail("read.rows-exact", "3 rows")
    with pytest.raises(KeyError):
        fail("read.no-such-clause", "x")


def test_every_clause_id_the_code_names_is_registered() -> None:
    """A typo in a clause id would only show when that check fails: catch it here."""
    named = {m for path in (ROOT / "stateful").rglob("*.py") for m in CLAUSE_ID.findall(path.read_text())}
    named |= {m for m in CLAUSE_ID.findall((ROOT / "tests" / "test_faults.py").read_text())}
    assert named and named <= set(CLAUSES), sorted(named - set(CLAUSES))


def test_python_m_stateful_clauses_lists_them() -> None:
    out = subprocess.run([sys.executable, "-m", "stateful", "clauses"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines()]
    assert listed == list(CLAUSES)
