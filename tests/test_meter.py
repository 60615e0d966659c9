"""stateful.meter, what the machine benchmark reads: off by default, and what it counts when on."""

from __future__ import annotations

from stateful import meter


def test_metering_is_off_unless_switched_on_and_counts_per_kind() -> None:
    assert meter.ACTIVE is None
    with meter.timed("terminal probe"):  # off: nothing recorded anywhere
        pass
    meter.sleep(0.0, "eventually")
    with meter.metering() as totals:
        with meter.timed("terminal probe"):
            pass
        meter.sleep(0.001, "eventually")
        meter.received("http items page", 120)
        meter.received("http items page", 30)
    assert meter.ACTIVE is None
    assert totals.counts == {"terminal probe": 1, "sleep eventually": 1}
    assert totals.seconds["sleep eventually"] >= 0.001
    assert totals.received == {"http items page": 150}


def test_requests_are_told_apart_by_what_they_are_for() -> None:
    kind = meter.http_kind
    assert kind("GET", "/v1/sessions/conv_1/items") == "http items page"
    assert kind("GET", "/v1/sessions/conv_1") == "http snapshot poll"
    assert kind("POST", "/v1/sessions/conv_1/events") == "http message post"
    assert kind("GET", "/v1/sessions/conv_1/resources/terminals") == "http terminals view"
    assert kind("POST", "/v1/sessions") == "http setup/other"
    assert kind("DELETE", "/v1/sessions/conv_1") == "http setup/other"
