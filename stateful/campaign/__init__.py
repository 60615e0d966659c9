"""Campaigns: every distinct bug of a server in one time-boxed run (``python -m stateful campaign``).

A campaign runs independent searches (workers, each a subprocess with its own seed and agent
sessions) until its budget is spent. A violated clause is shrunk once, written as a repro, then
ignored by every worker for the rest of the campaign while the search goes on; known deviations are
counted and never fail it. See docs/campaigns.md.

Modules, one job each: ``options`` (the command line), ``deviations`` (the TOML of known deviations),
``seen`` (the clauses claimed so far, shared by the workers), ``gate`` (in a worker: what a program
that meets an ignored clause becomes), ``database`` (``--db``), ``worker`` (one search),
``driver`` (starts the workers, shows progress, ends them), ``report`` (report.json, .md, junit.xml),
``progress`` (the refreshed status line).
"""
