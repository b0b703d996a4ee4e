"""The simulator's pure parts: profile validation, tokenizer, answers, prefix cache."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest

from tasks.sim import content
from tasks.sim.cache import PrefixCache
from tasks.sim.engine import bucket
from tasks.config.sim_profile import ProfileError, load_profile, parse_override, validate_profile
from tasks.sim.tokenizer import VOCAB_SIZE, count_tokens, decode, encode


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


# ---- profile --------------------------------------------------------------------------------
def test_profile_defaults_match_the_contract():
    p = validate_profile({})
    assert (p.model, p.context_limit, p.slots, p.ttft_base_s, p.itl_s) == ("dayone-sim-model", 1_048_576, 64, 0.02, 0.005)
    assert p.prefix_cache and p.cache_block_tokens == 16 and p.quirks.metrics == "normal"


def test_profile_rejects_unknown_fields_naming_them():
    with pytest.raises(ProfileError, match=r"faults\.crash_after"):
        validate_profile({"faults": {"crash_after": 3}})


def test_error_burst_needs_exactly_one_form():
    with pytest.raises(ProfileError, match="either after_requests and count"):
        validate_profile({"faults": {"error_burst": {"after_requests": 1}}})
    assert validate_profile({"faults": {"error_burst": {"start_s": 0, "duration_s": 1}}}).faults.error_burst


def test_file_then_json_then_overrides(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("slots: 2\nfaults:\n  never_ready: true\n  stall: {seconds: 1}\n")
    p = load_profile(f, json.dumps({"slots": 3, "seed": 9}), [parse_override("faults.stall.seconds=2.5")])
    assert (p.slots, p.seed, p.faults.never_ready, p.faults.stall.seconds) == (3, 9, True, 2.5)


# ---- tokenizer ------------------------------------------------------------------------------
def test_tokenizer_counts_four_char_pieces_of_words():
    assert count_tokens("Hello, world!") == 4  # Hell o, worl d!
    assert count_tokens("  a  bb ccc dddd eeeee ") == 6
    assert encode("Hello, world!") == encode("Hello, world!")


def test_decoded_ids_count_as_many_tokens():
    ids = [5, 70000, 123, 31999]
    text = decode(ids)
    assert count_tokens(text) == len(ids)
    assert encode(decode([1, 2, 3])) == [1, 2, 3]
    assert all(i >= VOCAB_SIZE for i in encode("XYZ!"))


# ---- answers --------------------------------------------------------------------------------
def test_needle_found_with_depth_and_wrong_code_differs():
    prompt = "x " * 50 + "The secret code is KQZT-4821. " + "y " * 50 + "What is the secret code?"
    needle = content.find_needle(prompt)
    assert needle.code == "KQZT-4821" and needle.depth == pytest.approx(100 / len(prompt))
    assert content.wrong_code("KQZT-4821") != "KQZT-4821"
    assert content.find_needle("The secret code is ABC. Tell me a story.") is None


@pytest.mark.parametrize("make,mime", [(png, "image/png"), (jpeg, "image/jpeg")])
def test_image_header_read(make, mime):
    url = f"data:{mime};base64," + base64.b64encode(make(64, 32)).decode()
    assert content.describe_image(url) == (mime, 64, 32)
    with pytest.raises(content.ImageError):
        content.describe_image("https://example.com/cat.png")


def test_tool_arguments_fill_required_with_types_and_enums():
    schema = {"type": "object", "required": ["city", "unit", "days", "exact"],
              "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
                             "days": {"type": "integer"}, "exact": {"type": "boolean"}, "extra": {"type": "number"}}}
    args = json.loads(content.tool_arguments({"name": "weather", "parameters": schema}))
    assert set(args) == {"city", "unit", "days", "exact"}
    assert isinstance(args["city"], str) and args["unit"] == "c" and isinstance(args["days"], int) and args["exact"] is True


# ---- prefix cache ---------------------------------------------------------------------------
def test_cache_hits_whole_leading_blocks_and_never_the_last_token():
    cache = PrefixCache(block_tokens=4, capacity_tokens=1000)
    tokens = list(range(17))
    assert cache.lookup_and_store(tokens) == 0
    assert cache.lookup_and_store(tokens) == 16
    assert cache.lookup_and_store(list(range(16))) == 12  # last token always computed
    assert cache.lookup_and_store([99] + tokens[1:]) == 0  # a changed first block breaks the chain


def test_cache_evicts_least_recently_used_blocks():
    cache = PrefixCache(block_tokens=4, capacity_tokens=16)  # 4 blocks
    a, b = list(range(9)), list(range(100, 109))  # 2 blocks each
    cache.lookup_and_store(a)
    cache.lookup_and_store(b)
    cache.lookup_and_store(list(range(200, 209)))  # evicts a
    assert cache.lookup_and_store(b) == 8
    assert cache.lookup_and_store(a) == 0
    cache.clear()
    assert len(cache) == 0


def test_shape_buckets_are_powers_of_two():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 128, 129)] == [1, 2, 4, 4, 8, 8, 16, 128, 256]
