"""The CONTRACT §6 helpers and fixtures under the names a server's suite gives them.

Plain repros (``stateful.plain``) import what they use ``from tests.e2e.conftest import ...``, the
way seed-style tests in a server's own suite do (omnigent keeps its helpers there). A server's team
has its own module of that name; this project's re-exports :mod:`stateful.e2e`'s, which is how
``python -m stateful replay`` and the tests run plain repros here. It shows what such a conftest
must provide: five helpers and six fixtures, nothing else.

Only names are re-exported, no hooks: the options (``--server-url`` ...) and the session-scoped
``contract_target`` behind the fixtures come from the ``stateful.e2e`` plugin, which the root
``conftest.py`` loads for this project's runs and ``replay`` loads with ``-p stateful.e2e``. Loaded
as a conftest of ``tests/e2e/`` by ``pytest tests/``, it redefines those fixtures with the very same
functions, which changes nothing.
"""

from __future__ import annotations

from stateful.e2e import (
    configure_mock_llm,
    create_runner_bound_session,
    harness_name,
    http_client,
    live_runner_id,
    live_server,
    mock_llm_server_url,
    model_name,
    poll_session_until_terminal,
    register_inline_agent,
    send_user_message_to_session,
)

__all__ = [
    "configure_mock_llm", "register_inline_agent", "create_runner_bound_session", "send_user_message_to_session",
    "poll_session_until_terminal", "live_server", "http_client", "live_runner_id", "harness_name", "model_name",
    "mock_llm_server_url",
]
