"""kv_retrieval tables are sized with the engine's own tokenizer and held against the model's context before
anything is sent (issue: a "4096" table at 4 characters a token is ~8K tokens on a BPE tokenizer that cuts keys
and digits finer, and overflowed an 8K model on every engine)."""

from __future__ import annotations

from types import SimpleNamespace

from tasks.config import parse_run_config
from tasks.quality.items import generate
from tasks.quality.run import items_of


def finer_tokenizer(text: str) -> int:
    """A tokenizer that cuts random keys and digits into two-character pieces, as BPE does with such text."""
    return max(1, len(text) // 2)


def _ctx(context_limit: int, lengths: list[int]) -> SimpleNamespace:
    config = parse_run_config({
        "model": {"name": "m", "context_limit_tokens": context_limit},
        "engines": [{"name": "a", "dialect": "vllm", "launcher": "sim"}],
        "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                      "quality": {"enabled": True, "items_per_family": 2, "kv_context_tokens": lengths}},
    })
    return SimpleNamespace(config=config, run_dir=None)


def _kv(items):
    return [i for i in items if i.family == "kv_retrieval"]


def test_a_table_sized_by_the_estimate_overflows_a_finer_tokenizer():
    """The reason for the fix: at 4 characters a token the 4096 table is about twice as long on this tokenizer."""
    table = _kv(generate(7, 2, [4096]))[0]
    assert finer_tokenizer(table.messages[-1]["content"]) > 1.8 * 4096


def test_tables_are_sized_with_the_engines_tokenizer():
    ctx = _ctx(8192, [1024, 4096])
    items = _kv(items_of(ctx, finer_tokenizer))
    assert {i.context_tokens for i in items} == {1024, 4096}
    for item in items:
        counted = finer_tokenizer(item.messages[-1]["content"])
        assert 0.9 * item.context_tokens <= counted <= 1.1 * item.context_tokens + 40, (item.id, counted)


def test_a_table_past_the_context_is_left_out_and_said(caplog):
    """8,064 tokens of table pass the config's check on nominal lengths, but with the question and the answer's
    budget the prompt no longer fits: the item is not sent, on any engine."""
    ctx = _ctx(8192, [4096, 8064])
    with caplog.at_level("WARNING", logger="dayone.quality"):
        items = items_of(ctx, finer_tokenizer)
    assert {i.context_tokens for i in _kv(items)} == {4096}
    assert any("kv_retrieval at 8064 tokens left out" in r.getMessage() for r in caplog.records)
    assert len([i for i in items if i.family == "arithmetic"]) == 2  # other families untouched


def test_without_a_tokenizer_the_stated_estimate_sizes_them_as_before():
    ctx = _ctx(8192, [1024])
    assert [i.messages for i in _kv(items_of(ctx, None))] == [i.messages for i in _kv(generate(0, 2, [1024]))]
