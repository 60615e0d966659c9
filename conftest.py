"""Loads the seed-style helpers' pytest plugin (CONTRACT §6) for both `pytest stateful/` and
`pytest tests/`: its fixtures (live_server, http_client, live_runner_id, ...) and options (--profile,
--server-url, --mock-llm-url, --runner-id). pytest accepts `pytest_plugins` only in the top-level
conftest, so it lives here and not in stateful/ or tests/ (a bare `pytest` collects both).
Outside this project, load it with `-p stateful.e2e` (and `-p stateful.conftest` for the machine's
fixtures, e.g. to replay a written repro)."""

pytest_plugins = ["stateful.e2e"]
