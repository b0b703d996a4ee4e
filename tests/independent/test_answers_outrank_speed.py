"""Answers outrank speed (docs/PROTOCOL.md, "Answers"): two engines answer the same items, one served by a
plain server that answers everything right and one that corrupts half the arithmetic; the decision names
the broken engine's arithmetic first, and its speed lead only with the caveat."""

from __future__ import annotations

from answers_summary import answers_summary, throughput_comparison
from quality_server import CorruptsHalfTheArithmetic, SolvesEverything

from tasks.report.decision import decide
from tasks.report.schema.capacity import Capacity

def _capacity(passed: float, failed: float) -> Capacity:
    """A capacity search's result without its probes: enough for the decision's capacity line."""
    return Capacity(mode="concurrency", input_tokens=64, output_tokens=16, target_goodput_share=0.9,
                    confidence=0.95, start=1, max=64, step=2, outcome="found", capacity=passed,
                    bracket=[passed, failed], text=f"{passed:g} concurrent requests", probes=[])


def test_the_engine_with_worse_answers_is_named_first_and_its_speed_lead_carries_the_caveat(tmp_path):
    servers = {"right": SolvesEverything, "fast": CorruptsHalfTheArithmetic}
    summary, _ = answers_summary(tmp_path, servers, "answers-run")
    summary.comparisons = [throughput_comparison("fast", "right")]
    summary.engines["right"].capacity, summary.engines["fast"].capacity = _capacity(4, 8), _capacity(16, 32)
    leads = [d.text for d in decide(summary) if d.topic == "leads"]
    assert leads[0].startswith("Answers differ: fast answered worse in arithmetic 50% (4/8) against right's "
                               "100% (8/8), difference CI"), leads
    assert sum("Answers differ" in line for line in leads) == 1  # only the planted family, only that engine
    assert "sorting" not in leads[0] and "right answered worse" not in " ".join(leads)
    speed = next(line for line in leads if line.startswith("short output throughput, fast vs right"))
    assert "better" in speed and "Not a reason to choose fast: its answers are worse" in speed, speed
    capacity = next(line for line in leads if line.startswith("capacity, fast vs right"))
    assert capacity.endswith("Not a reason to choose fast: its answers are worse (see above)."), capacity


def test_engines_that_answer_alike_get_no_answers_line_and_no_caveat(tmp_path):
    summary, _ = answers_summary(tmp_path, {"right": SolvesEverything, "also-right": SolvesEverything}, "answers-run")
    summary.comparisons = [throughput_comparison("also-right", "right")]
    leads = [d.text for d in decide(summary) if d.topic == "leads"]
    assert not any("Answers differ" in line or "Not a reason" in line for line in leads), leads
    assert leads[0].startswith("short output throughput, also-right vs right: at c=4"), leads
