"""A property-based, stateful tester for the ``sys_terminal_*`` tools of agent servers.

See ``README.md`` for the commands and ``../shared/CONTRACT.md`` for the behaviour that is checked.
"""

__version__ = "0.1.0"
