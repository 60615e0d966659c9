"""The CI action (issue 25, section 4): ``action.yml`` is a composite action whose every expression
names an input or step output that exists, and whose shell steps, run here as a runner would run them
(``bash -eo pipefail``, the runner's variables in the environment), run a campaign, write the job
summary and fail the job exactly when the campaign exits 1. The nightly workflow uses it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_campaign import FAULTS, findings_beyond, run_root  # noqa: F401 - run_root: a fixture used below

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
NIGHTLY = ROOT / ".github" / "workflows" / "nightly.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
REQUIRED_INPUTS = {"server-url", "mock-llm-url", "runner-id", "budget", "deviations"}


def action() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    return loaded


def expressions(node: Any) -> list[str]:
    """Every ``${{ ... }}`` in the strings of a parsed YAML tree."""
    if isinstance(node, dict):
        return [e for value in node.values() for e in expressions(value)]
    if isinstance(node, list):
        return [e for value in node for e in expressions(value)]
    return EXPRESSION.findall(node) if isinstance(node, str) else []


def test_the_action_is_composite_with_the_inputs_the_issue_names() -> None:
    parsed = action()
    assert parsed["runs"]["using"] == "composite"
    assert REQUIRED_INPUTS <= set(parsed["inputs"])
    for name, spec in parsed["inputs"].items():
        assert spec.get("description"), name
        assert spec.get("required") is False and "default" in spec, name  # every input optional, defaulted
    uses = [step["uses"].split("@")[0] for step in parsed["runs"]["steps"] if "uses" in step]
    assert "actions/upload-artifact" in uses
    for step in parsed["runs"]["steps"]:
        assert "uses" in step or step.get("shell") == "bash", step  # a composite run step must name its shell


def test_every_expression_names_an_input_or_step_output_that_exists() -> None:
    parsed = action()
    inputs = set(parsed["inputs"])
    step_ids = {step["id"] for step in parsed["runs"]["steps"] if "id" in step}
    found = expressions(parsed)
    assert found
    for text in found:
        for name in re.findall(r"\binputs\.([A-Za-z0-9_-]+)", text):
            assert name in inputs, f"${{{{ {text} }}}}: no input {name!r}"
        for step in re.findall(r"\bsteps\.([A-Za-z0-9_-]+)\.outputs\.", text):
            assert step in step_ids, f"${{{{ {text} }}}}: no step with id {step!r}"
    written = {m for step in parsed["runs"]["steps"] for m in re.findall(r"^([a-z-]+)=", step.get("run", ""), re.M)}
    written |= {m for step in parsed["runs"]["steps"]
                for m in re.findall(r'echo "([a-z-]+)=', step.get("run", ""))}
    for name, spec in parsed["outputs"].items():
        for output in re.findall(r"steps\.campaign\.outputs\.([a-z-]+)", spec["value"]):
            assert output in written, f"output {name}: the campaign step never writes {output}"


def test_the_nightly_workflow_uses_the_action_with_inputs_it_declares() -> None:
    workflow = yaml.safe_load(NIGHTLY.read_text(encoding="utf-8"))
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    (uses,) = [step for step in steps if step.get("uses") == "./"]
    assert set(uses["with"]) <= set(action()["inputs"]), set(uses["with"]) - set(action()["inputs"])


def shell_steps() -> dict[str, str]:
    return {step["name"]: step["run"] for step in action()["runs"]["steps"] if "run" in step}


def run_step(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """One ``run:`` step as the runner runs it (``shell: bash`` is ``bash -eo pipefail``)."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def runner(tmp_path: Path, run_root: Path, **inputs: str) -> dict[str, str]:  # noqa: F811
    """The environment of the campaign step: the installed command (here a shim that runs this
    checkout's package), the runner's files, the inputs as the step's env maps them."""
    temp = tmp_path / "runner-temp"
    command = temp / "agent-terminal-conformance" / "bin" / "agent-terminal-conformance"
    command.parent.mkdir(parents=True)
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m stateful "$@"\n', encoding="utf-8")
    command.chmod(0o755)
    env = {**os.environ, "RUNNER_TEMP": str(temp), "TMPDIR": str(run_root),
           "GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
           "SERVER_URL": "", "MOCK_LLM_URL": "", "RUNNER_ID": "", "DEVIATIONS": "", "WORKERS": "1",
           "REPORT_DIR": "conformance-report", "BUDGET": "12s"}
    env.update(inputs)
    return env


def run_the_action(tmp_path: Path, env: dict[str, str]) -> tuple[str, subprocess.CompletedProcess[str]]:
    """The campaign, summary and verdict steps in order: (the exit-code output, the verdict step)."""
    steps = shell_steps()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    campaign = run_step(steps["campaign"], env, workspace)
    assert campaign.returncode == 0, campaign.stdout + campaign.stderr  # the step itself never fails
    (tmp_path / "campaign.log").write_text(campaign.stdout + campaign.stderr, encoding="utf-8")  # the job's log
    (output,) = (tmp_path / "output").read_text(encoding="utf-8").splitlines()
    summary = run_step(steps["the clause results in the job summary"], env, workspace)
    assert summary.returncode == 0, summary.stderr
    verdict = run_step(steps["the verdict"], {**env, "STATUS": output.removeprefix("exit-code=")}, workspace)
    return output, verdict


def test_a_clean_campaign_passes_and_fills_the_summary(tmp_path: Path, run_root: Path) -> None:  # noqa: F811
    env = runner(tmp_path, run_root, EXTRA_ARGS="--target direct --quiet", STATEFUL_FAULTS="")
    output, verdict = run_the_action(tmp_path, env)
    assert output == "exit-code=0"
    assert verdict.returncode == 0, verdict.stdout
    report = tmp_path / "workspace" / "conformance-report"
    assert {"report.json", "report.md", "junit.xml"} <= {p.name for p in report.iterdir()}
    assert (tmp_path / "summary").read_text(encoding="utf-8") == (report / "report.md").read_text(encoding="utf-8")


@pytest.mark.proof  # a campaign that meets a planted fault, shrinks it and writes its repro (the proofs tier)
def test_a_failed_clause_fails_the_job_and_keeps_the_repro(tmp_path: Path, run_root: Path) -> None:  # noqa: F811
    # three planted faults, each met by its own rule: one at least is met and shrunk within the budget
    # (usually in seconds; 30 s once left a failure met too late to be written under load)
    env = runner(tmp_path, run_root, EXTRA_ARGS="--target direct --quiet --shrink-budget 5",
                 STATEFUL_FAULTS=",".join(FAULTS), BUDGET="45s", WORKERS="2")
    output, verdict = run_the_action(tmp_path, env)
    assert output == "exit-code=1"
    assert verdict.returncode == 1 and "::error::a clause of the contract failed" in verdict.stdout, verdict
    report = tmp_path / "workspace" / "conformance-report"
    failures = json.loads((report / "report.json").read_text(encoding="utf-8"))["failures"]
    failed = {f["clause"] for f in failures}
    summary = (tmp_path / "summary").read_text(encoding="utf-8")
    assert failed and failed <= set(FAULTS.values()) and all(clause in summary for clause in failed), \
        findings_beyond(failures, FAULTS.values(), tmp_path / "workspace")
    repros = [Path(f["repro"]) for f in failures if f.get("repro")]
    said = (tmp_path / "campaign.log").read_text(encoding="utf-8")  # --quiet, yet the log says what failed
    assert all(f"FAILED {f.get('key', f['clause'])}: " in said for f in failures), said
    assert repros, (report / "report.md").read_text(encoding="utf-8")  # in the artifact's directory:
    assert all((tmp_path / "workspace" / r).resolve().parent == (report / "repros").resolve() for r in repros), repros
    assert all((tmp_path / "workspace" / r).is_file() for r in repros), repros


def test_a_usage_error_fails_the_job_with_its_own_status(tmp_path: Path, run_root: Path) -> None:  # noqa: F811
    env = runner(tmp_path, run_root, EXTRA_ARGS="--target direct", BUDGET="soon")
    output, verdict = run_the_action(tmp_path, env)
    assert output == "exit-code=2"
    assert verdict.returncode == 2 and "could not run (exit 2" in verdict.stdout, verdict
    assert "No report was written" in (tmp_path / "summary").read_text(encoding="utf-8")
