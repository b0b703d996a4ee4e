"""Needle prompts: deterministic, exact lengths through a tokenizer, the needle at its depth."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.load.prompts import (
    CalibrationError, FillerPool, calibrate, filler_words, find_code, make_code, needle_text,
)
from tasks.sim.tokenizer import count_tokens


@pytest.mark.parametrize("target", [60, 333, 1000, 4400, 32768])
@pytest.mark.parametrize("depth", [0.1, 0.5, 0.9])
def test_calibrated_prompts_have_exactly_the_target_length(target, depth):
    code = make_code(f"{target}:{depth}")
    prompt = calibrate(target, lambda w: needle_text(w, depth, code), count_tokens)
    assert count_tokens(prompt.text) == prompt.counted_tokens == target
    assert not prompt.estimated


def test_calibration_never_exceeds_the_target_when_exact_is_impossible():
    # A tokenizer where every filler word costs 3 tokens: odd gaps cannot be closed exactly.
    def coarse(text: str) -> int:
        return 3 * len(text.split())

    prompt = calibrate(1000, lambda w: " ".join(w), coarse)
    assert coarse(prompt.text) <= 1000 and coarse(prompt.text) >= 997


def test_needle_sits_at_a_sentence_boundary_near_its_depth():
    words = filler_words(2000)
    for depth in (0.1, 0.5, 0.9):
        text = needle_text(words, depth, "AB12-CD34")
        position = text.index("The secret code is AB12-CD34.") / len(text)
        assert abs(position - depth) < 0.02
        assert text[: text.index("The secret")].rstrip().endswith(".")
        assert text.rstrip().endswith("Reply with the code only.") and "secret code" in text[-120:]


def test_prompts_are_deterministic_and_prefix_stable():
    assert filler_words(500) == filler_words(500)
    assert FillerPool().take(100) == FillerPool().take(700)[:100]
    assert make_code("32768:0.5") == make_code("32768:0.5") != make_code("32768:0.9")
    assert FillerPool("other").take(50) != FillerPool().take(50)


def test_only_the_exact_code_passes():
    assert find_code("K7QX-94MB", "K7QX-94MB")
    assert find_code("The secret code is K7QX-94MB.", "K7QX-94MB")
    assert not find_code("K7QX-94MC", "K7QX-94MB")  # one character off
    assert not find_code("XK7QX-94MB", "K7QX-94MB")  # inside a longer code
    assert not find_code("k7qx-94mb", "K7QX-94MB")
    assert not find_code("", "K7QX-94MB")


def test_a_target_smaller_than_the_question_is_refused():
    with pytest.raises(CalibrationError, match="fixed part"):
        calibrate(5, lambda w: needle_text(w, 0.5, "AB12-CD34"), count_tokens)


@settings(max_examples=40, deadline=None)
@given(target=st.integers(min_value=40, max_value=20_000), depth=st.floats(min_value=0.0, max_value=1.0))
def test_calibration_is_exact_and_never_over_for_any_target(target, depth):
    prompt = calibrate(target, lambda w: needle_text(w, depth, "AB12-CD34"), count_tokens)
    assert count_tokens(prompt.text) == target
    assert prompt.text.count("The secret code is AB12-CD34.") == 1
