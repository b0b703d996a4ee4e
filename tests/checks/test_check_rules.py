"""The judging rules of the checks, on hand-built responses (no server needed)."""

from __future__ import annotations

import io

from PIL import Image

from tasks.checks.image_input import COLOUR_RGB, HEIGHT, WIDTH, data_url, png_bytes
from tasks.checks.output_streams import judge_stream
from tasks.checks.tool_call import judge_tool_calls
from tasks.engines.stream import OutputEvent, StreamResult


def test_generated_png_is_a_real_png_of_the_declared_size_and_colour():
    png = png_bytes(WIDTH, HEIGHT, COLOUR_RGB)
    image = Image.open(io.BytesIO(png))
    image.load()
    assert image.format == "PNG" and image.size == (WIDTH, HEIGHT) and image.mode == "RGB"
    assert image.getpixel((WIDTH - 1, HEIGHT - 1)) == COLOUR_RGB
    assert data_url(png).startswith("data:image/png;base64,iVBORw0KGgo")


def _stream(chunks: list[str], completion_tokens: int | None) -> StreamResult:
    s = StreamResult(status=200, done=True)
    s.output_events = [OutputEvent(0.01 * (i + 1), c, "", 0) for i, c in enumerate(chunks)]
    s.content = "".join(chunks)
    s.usage = None if completion_tokens is None else {"prompt_tokens": 5, "completion_tokens": completion_tokens}
    return s


def test_a_stream_with_text_over_many_events_streams():
    assert judge_stream(_stream(["one", " two", " three", " four"], 4)) is None


def test_text_only_in_one_event_does_not_stream():
    why = judge_stream(_stream(["one two three four five six"], 6))
    assert why is not None and "one event" in why


def test_text_mostly_in_the_last_event_does_not_stream():
    why = judge_stream(_stream(["one", " two three four five six seven eight nine ten"], 10))
    assert why is not None and "last event" in why


def test_no_text_in_any_delta_does_not_stream():
    assert "no delta" in judge_stream(_stream([], 8))


def test_a_single_token_answer_in_one_event_is_fine():
    assert judge_stream(_stream(["Yes"], 1)) is None


def test_without_usage_words_stand_in_for_tokens():
    assert judge_stream(_stream(["one two three"], None)) is not None
    assert judge_stream(_stream(["one", " two", " three", " four"], None)) is None


def _call(name: str, arguments: str) -> list[dict]:
    return [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]


def test_tool_call_passes_only_with_the_right_name_and_schema_valid_json():
    assert judge_tool_calls("tool_call", 200, _call("get_weather", '{"city": "Paris"}')).outcome == "pass"
    wrong_name = judge_tool_calls("tool_call", 200, _call("get_time", '{"city": "Paris"}'))
    assert wrong_name.outcome == "fail" and "name" in wrong_name.evidence["reason"]
    not_json = judge_tool_calls("tool_call", 200, _call("get_weather", '{"city": "Par'))
    assert not_json.outcome == "fail" and "not JSON" in not_json.evidence["reason"]
    no_city = judge_tool_calls("tool_call", 200, _call("get_weather", '{"unit": "celsius"}'))
    assert no_city.outcome == "fail" and "schema" in no_city.evidence["reason"]
    bad_enum = judge_tool_calls("tool_call", 200, _call("get_weather", '{"city": "Paris", "unit": "kelvin"}'))
    assert bad_enum.outcome == "fail"
    assert judge_tool_calls("tool_call", 200, []).outcome == "fail"
