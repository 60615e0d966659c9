"""How the machine's calls reach a system: one interface (base), in-process (direct), HTTP
(sessions), and ground truth from tmux and /proc (probe)."""
