"""Types of the OpenAI Responses wire that both ends of the reference stack speak.

The agent loop (a client of any Responses endpoint) and the mock LLM (one such endpoint) never import
each other: the agent must work against a real model as well. What they share is the wire's vocabulary,
which lives here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` output item: the model asks for tool ``name`` with ``arguments`` (JSON text);
    the ``function_call_output`` that answers it carries the same ``call_id``. The mock LLM scripts
    replies of these, the agent loop reads them from a reply and runs them."""

    call_id: str
    name: str
    arguments: str
