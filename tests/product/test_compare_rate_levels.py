"""The nightly comparison keys a rate level by its rate alone (PROTOCOL.md section 6, "Closed and open
loop"): a run whose rate rounds have a null concurrency compares with an older archive whose rate rounds
held their request count in concurrency."""

from __future__ import annotations

from product_fixtures import round_row

from tasks.compare.sides import Side
from tasks.state.tables import to_frame


def _side(run_id: str, rows: list[dict]) -> Side:
    return Side(run_id, to_frame("rounds", rows), to_frame("checks", []), to_frame("needles", []), None, True)


def test_a_rate_level_has_the_same_key_in_an_older_archive_and_a_new_run():
    older = [{**round_row("old", "e", 32, rnd, 100.0, 0.2, scenario="rate"), "rate_rps": 2.0} for rnd in (1, 2)]
    newer = [{**round_row("new", "e", 4, rnd, 100.0, 0.2, scenario="rate"), "concurrency": None, "rate_rps": 2.0}
             for rnd in (1, 2)]
    closed = [round_row("new", "e", 4, 1, 90.0, 0.3)]
    assert set(_side("old", older).shape_rounds()) == {("rate", None, 2.0)}
    new = _side("new", newer + closed)
    assert set(new.shape_rounds()) == {("rate", None, 2.0), ("short", 4, None)}
    assert new.shape_counts()[("rate", None, 2.0)] == {"ok": 16, "failed": 0, "rounds": 2, "rounds_failed": 0}
