"""The embedded reference stack: a contract-exact implementation of the terminal tools, the sessions
API, the agent loop and the mock LLM. ``pytest stateful/`` runs against it by default."""
