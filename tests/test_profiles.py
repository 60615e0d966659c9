"""stateful/hypothesis.ini, its loading (stateful.profiles) and the default of the machine's pytest plugin
(stateful.pytest_machine, which is stateful/conftest.py): profiles dev, ci, nightly, repro, campaign."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from hypothesis import Phase, settings


@pytest.fixture
def stateful_conftest() -> Iterator[object]:
    """Import the machine's pytest plugin (it loads 'dev'), then restore the profile these tests ran with."""
    previous = settings.get_current_profile_name()
    module = importlib.import_module("stateful.pytest_machine")
    try:
        yield module
    finally:
        settings.load_profile(previous)


def test_every_profile_is_registered(stateful_conftest: object) -> None:
    from stateful.profiles import load_profiles

    configs = load_profiles()
    assert set(configs) == {"dev", "ci", "nightly", "repro", "campaign"}
    for name in configs:
        profile = settings.get_profile(name)
        assert profile.deadline is None, name
    assert settings.get_profile("ci").derandomize and settings.get_profile("ci").database is None
    assert not settings.get_profile("nightly").derandomize
    assert settings.get_profile("repro").phases == (Phase.explicit, Phase.reuse)
    assert settings.get_profile("dev").database is not None
    assert configs["dev"].step_timeout == 60 and configs["dev"].poll_deadline == 15


def test_dev_is_the_default(stateful_conftest: object) -> None:
    importlib.reload(stateful_conftest)  # type: ignore[arg-type]
    assert settings.get_current_profile_name() == "dev"
