"""``report.html``: the campaign report as one self-contained page (inline CSS and SVG, no script, no
network), for people: the verdict of every clause, each finding with its minimal program and
transcript (folded in ``<details>``), and a timeline over the budget: steps per second, and when
each finding was met and when it was shrunk.

Everything a server printed reaches the page through :func:`html.escape` only.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from stateful.campaign.report import BEHIND, NOT_SHRUNK
from stateful.campaign.verdicts import VERDICTS, contract_link

if TYPE_CHECKING:
    from stateful.campaign.report import CampaignReport

__all__ = ["html_report", "timeline_svg"]

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#1b1f23}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}code,pre{font:12px/1.35 ui-monospace,monospace}pre{background:#f6f8fa;padding:.6em;overflow:auto}
.v{font-weight:600;white-space:nowrap}td:nth-child(2){white-space:nowrap}.failed,.stale{color:#b00020}.known{color:#8a5a00}.passed{color:#1a7f37}
.not-exercised,.shallow{color:#666}.summary span{margin-right:1.2em}details{margin:.4em 0}summary{cursor:pointer}
svg text{font:11px system-ui,sans-serif}
"""
WIDTH, HEIGHT, MARGIN = 720, 220, 40
COLOURS = {"met": "#b00020", "shrunk": "#1a7f37"}


def _headline(report: CampaignReport) -> tuple[str, str]:
    stale = bool(report.stale)
    if report.interrupted:
        return ("FAILED (interrupted)" if report.failed else "interrupted"), "failed"
    if report.failed:
        return "FAILED", "failed"
    if stale:
        return "STALE deviations", "stale"
    return "passed", "passed"


def timeline_svg(report: CampaignReport) -> str:
    """Steps per second over the budget (a line) and, for each finding, when it was met (a red mark)
    and shrunk (a green one), as inline SVG."""
    span = max(report.budget_s, report.elapsed_s, 1.0)
    points = report.timeline
    rates = [(t1, (s1 - s0) / (t1 - t0)) for (t0, s0), (t1, s1) in zip(points, points[1:]) if t1 > t0]
    top = max([r for _, r in rates] + [1.0])
    inner_w, inner_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def x(t: float) -> float:
        return MARGIN + inner_w * min(t, span) / span

    def y(rate: float) -> float:
        return HEIGHT - MARGIN - inner_h * rate / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="steps per second over the budget">',
             f'<rect x="{MARGIN}" y="{MARGIN}" width="{inner_w}" height="{inner_h}" fill="#fafafa" stroke="#ccc"/>',
             f'<text x="{MARGIN}" y="{MARGIN - 8}">{top:.1f} steps/s</text>',
             f'<text x="{MARGIN}" y="{HEIGHT - MARGIN + 16}">0 s</text>',
             f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" text-anchor="end">{span:g} s</text>']
    if rates:
        path = " ".join(f"{x(t):.1f},{y(r):.1f}" for t, r in rates)
        parts.append(f'<polyline class="rate" points="{path}" fill="none" stroke="#0b5cad" stroke-width="1.5"/>')
    else:
        parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no steps recorded</text>')
    for f in report.failures:
        for kind, at in (("met", f.get("first_seen_s")), ("shrunk", f.get("shrunk_s"))):
            if at is None:
                continue
            label = escape(f"{f['clause']} {kind} at {at} s")
            parts.append(f'<line class="{kind}" x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{MARGIN}" y2="{HEIGHT - MARGIN}" '
                         f'stroke="{COLOURS[kind]}" stroke-dasharray="4 3"><title>{label}</title></line>')
    parts.append(f'<text x="{WIDTH - MARGIN}" y="{MARGIN - 8}" text-anchor="end" fill="#555">'
                 f'dashed: a finding met (red) and shrunk (green)</text></svg>')
    return "".join(parts)


def _finding(f: dict[str, Any], repeats: int) -> str:
    shrunk = (f"shrunk to {f['steps_shrunk']} steps in {f.get('shrink_s')} s" if f.get("steps_shrunk") is not None
              else "seen once, not reproduced by its replays" if f.get("reproduced") is False
              else NOT_SHRUNK)
    repro = f"<p>repro: <code>{escape(str(f['repro']))}</code></p>" if f.get("repro") else "<p>repro: none</p>"
    plain = f"<p>plain repro: <code>{escape(str(f['plain']))}</code></p>" if f.get("plain") else ""
    behind = f"<p>{escape(BEHIND.format(', '.join(f.get('behind') or ())))}</p>" if f.get("behind") else ""
    return (f'<h3 id="finding-{escape(f["clause"])}"><code>{escape(f["clause"])}</code></h3>'
            f"<p>{escape(str(f.get('message', '')))}</p>"
            f"<p>found after {escape(str(f.get('first_seen_s')))} s ({escape(str(f.get('steps_found')))} steps), "
            f"{escape(shrunk)}; met again {repeats} times</p>{behind}{repro}{plain}"
            f"<details><summary>minimal program and transcript</summary>"
            f"<pre>{escape(str(f.get('report') or f.get('message', '')))}</pre></details>")


def html_report(report: CampaignReport) -> str:
    head, kind = _headline(report)
    rate = report.steps / report.elapsed_s if report.elapsed_s else 0.0
    counts = {v: sum(c.verdict == v for c in report.clauses) for v in VERDICTS}
    rows = "".join(
        f'<tr><td><code>{escape(c.id)}</code></td><td><a href="{escape(contract_link(c.section))}">'
        f'{escape(c.section)}</a></td><td class="v {c.verdict}">{c.verdict}</td><td>{c.programs}</td>'
        f"<td>{escape(c.why)}</td></tr>" for c in report.clauses)
    findings = "".join(_finding(f, report.repeats.get(f["clause"], 0)) for f in report.failures) or "<p>None.</p>"
    stale = ("<h2>Stale deviations: remove their entries</h2><ul>"
             + "".join(f"<li>{escape(e.line())}</li>" for e in report.stale) + "</ul>") if report.stale else ""
    errors = ("<h2>Errors of the tester</h2>" + "".join(f"<pre>{escape(e)}</pre>" for e in report.errors)
              if report.errors else "")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Campaign report: {escape(head)}</title>'
            f"<style>{CSS}</style></head><body>"
            f'<h1>Campaign report: <span class="{kind}">{escape(head)}</span></h1>'
            f"<p>{report.elapsed_s:g} s of a {report.budget_s:g} s budget, {report.workers} workers: "
            f"{report.programs} programs, {report.steps} steps ({rate:.1f} steps/s), "
            f"{len(report.failures)} distinct failures"
            + (f"; the largest agent conversation reached {report.largest_conversation / 1000:.1f} kB"
               if report.largest_conversation else "") + ".</p>"
            f'<p class="summary">' + "".join(f'<span class="{v}">{n} {v}</span>' for v, n in counts.items()) + "</p>"
            f"<h2>Timeline</h2>{timeline_svg(report)}{stale}"
            f"<h2>Findings</h2>{findings}"
            f'<h2>Clauses</h2><table><thead><tr><th>clause</th><th>section</th><th>verdict</th>'
            f"<th>programs</th><th>why</th></tr></thead><tbody>{rows}</tbody></table>{errors}"
            f"</body></html>\n")
