"""The run profiles of ``stateful/hypothesis.ini``: Hypothesis's settings and the machine's own.

Each section of the ini is one profile: its plain keys are Hypothesis settings (registered with
Hypothesis under the section's name), its ``machine.*`` keys the fields of :class:`MachineConfig`.
Everything that runs the machine reads them here: the pytest plugin (which loads ``--hypothesis-profile``),
the campaign workers (the ``campaign`` profile), the benchmarks and the fault proofs (``ci``). Reading
them registers them with Hypothesis, once per process; nothing here loads a profile.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from stateful.locations import HYPOTHESIS_INI, work_root
from stateful.machine import MachineConfig

__all__ = ["DEFAULT_PROFILE", "ProfileError", "load_profiles", "machine_config", "machine_configs"]

DEFAULT_PROFILE = "dev"
"""The profile ``pytest stateful/`` runs without ``--hypothesis-profile``."""
MACHINE_PREFIX = "machine."
"""The prefix of an ini key that sets a :class:`MachineConfig` field rather than a Hypothesis setting."""


class ProfileError(ValueError):
    """The ini cannot be read, or names a machine field that does not exist (one line)."""


def _value(key: str, raw: str) -> Any:
    """One ini value as the Hypothesis setting (or MachineConfig field) expects it."""
    text = raw.strip()
    names = [part.strip() for part in text.split(",") if part.strip()]
    if key == "suppress_health_check":
        return [HealthCheck[n] for n in names]
    if key == "phases":
        return [Phase[n] for n in names]
    if key == "verbosity":
        return Verbosity[text]
    if key == "database":
        return None if text.lower() == "none" else DirectoryBasedExampleDatabase(str(work_root() / text))
    if text.lower() in ("none", "null"):
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_profiles(path: Path = HYPOTHESIS_INI) -> dict[str, MachineConfig]:
    """Register every profile of the ini with Hypothesis; return each profile's MachineConfig."""
    parser = configparser.ConfigParser()
    if not parser.read(path, encoding="utf-8"):
        raise ProfileError(f"cannot read {path}")
    machines: dict[str, MachineConfig] = {}
    fields = {f.name for f in dataclasses.fields(MachineConfig)}
    for name in parser.sections():
        options: dict[str, Any] = {}
        machine: dict[str, Any] = {}
        for key, raw in parser.items(name):
            if key.startswith(MACHINE_PREFIX):
                field = key[len(MACHINE_PREFIX):]
                if field not in fields:
                    raise ProfileError(f"{path}: [{name}] {key}: MachineConfig has no field {field!r}")
                machine[field] = _value(field, raw)
            else:
                options[key] = _value(key, raw)
        if options.get("derandomize"):
            options.pop("database", None)  # derandomize=True implies database=None
        settings.register_profile(name, **options)
        machines[name] = MachineConfig(**machine)
    return machines


@functools.cache
def machine_configs() -> dict[str, MachineConfig]:
    """The packaged ini's profiles, registered with Hypothesis on the first call."""
    return load_profiles()


def machine_config(profile: str, **changes: Any) -> MachineConfig:
    """The MachineConfig of ``profile`` (the defaults for a profile the ini lacks), with ``changes``
    (fields whose value is None are left as the profile has them)."""
    config = machine_configs().get(profile.split("-with-")[0], MachineConfig())
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
