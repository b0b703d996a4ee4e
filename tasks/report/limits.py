"""What this run did not prove: the limits that follow from its own config and results.

The standing limits (summary.STANDING_LIMITS) hold for every run; these are this run's, in the manner of
the Day-1 report's "what this round did not prove": speculative decoding off (or on, and with it an
acceptance that random prompts do not show), no video, one weights precision, one node, one GPU product,
engines whose streams were never shown, scenarios switched off, a context window not reached, answers
checked only on the generated task set (or not at all), a moving model revision not resolved to a commit,
engines that served different weights (so not compared on answers). Each engine's switches
are read through its adapter; a switch DayOne cannot read for a dialect is said to be unknown, never
assumed off. One pure function, read by summary.json and the report.
"""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.engines import adapter_for
from tasks.evidence.revision import moving_text
from tasks.report.schema import RunSummary
from tasks.core.names import SCENARIO_SWITCHES


def not_proved(config: RunConfig, summary: RunSummary) -> list[str]:
    """This run's limits, each a sentence naming the engines and settings it comes from."""
    if summary.dry_run:
        return []
    ready = [e.name for e in config.engines if summary.engines.get(e.name) and summary.engines[e.name].ready]
    specs = [config.engine(name) for name in ready]
    if not specs:
        return []
    out = [_speculative(specs), _weights(specs, config), _nodes(specs, summary), _gpus(ready, summary)]
    out.append("Video input was not tested: DayOne sends no video; image input only where the image_input "
               "check passed" + _image(ready, summary) + ".")
    for name in ready:
        e = summary.engines[name]
        if not e.ttft.reliable:
            out.append(f"{name}: its stream timing was never shown reliable, so TTFT, TPOT and ITL are unproven "
                       f"({e.ttft.reason}).")
    off = [name for name in SCENARIO_SWITCHES if not getattr(config.scenarios, name).enabled]
    if off:
        out.append(f"Switched off in the config, so nothing is known of them from this run: {', '.join(off)}.")
    out.append(_context(config, summary, ready))
    out.append(_answers(config, summary, ready))
    out.append(_client(config))
    concurrency = _max_concurrency(summary, ready)
    if concurrency:
        out.append(f"Loads above concurrency {concurrency} (the highest measured) were not tested.")
    out += _served_weights(summary, ready)
    return [line for line in out if line]


def _served_weights(summary: RunSummary, ready: list[str]) -> list[str]:
    """Which weights the engines served: a moving revision not resolved before deploy (each engine's own
    report then says what it served), an engine that served other than the commit it was given, and the
    engines whose answers and log-likelihood were not compared because their weights differ."""
    out = []
    resolved = summary.resolved_revision
    given = resolved.commit if resolved is not None else None
    if resolved is not None and not given and resolved.why:
        out.append(f"The model revision was not resolved to a commit before deploy: {resolved.why}.")
    for name in ready:
        rev = summary.engines[name].served_revision
        if rev is None:
            continue
        if given and rev.served and rev.served != given:
            out.append(f"{name} served {rev.served} (from {rev.served_source}), not the commit {given} every "
                       "engine was given.")
        elif not given and (text := moving_text(name, rev.model_dump())):
            out.append(text + ".")
    out += [f"{p.a} and {p.b} are not compared on answers or log-likelihood: {p.text}."
            for p in summary.same_weights if p.verdict == "differ"]
    return out


def _speculative(specs: list) -> str:
    on, off, unknown = [], [], []
    for spec in specs:
        adapter = adapter_for(spec.dialect)
        if not adapter.speculative_args:
            unknown.append(spec.name)
        elif (value := adapter.launch_setting(spec.args, adapter.speculative_args)) is not None:
            on.append(f"{spec.name} ({value})")
        else:
            off.append(spec.name)
    parts = []
    if off:
        parts.append(f"Speculative decoding (MTP, EAGLE, a draft model) was off for {', '.join(off)}: its effect "
                     "on TTFT, TPOT, throughput and memory was not measured")
    if on:
        parts.append(f"speculative decoding was on for {', '.join(on)}: its acceptance on random-token prompts "
                     "is not what real text gets, so its speed-up here proves nothing for production traffic")
    if unknown:
        parts.append(f"whether {', '.join(unknown)} decoded speculatively is unknown (DayOne does not read that "
                     "dialect's switches)")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def _weights(specs: list, config: RunConfig) -> str:
    parts = []
    for spec in specs:
        adapter = adapter_for(spec.dialect)
        given = adapter.launch_setting(spec.args, adapter.weights_dtype_args) if adapter.weights_dtype_args else None
        parts.append(f"{spec.name} {given}" if given else f"{spec.name} as the checkpoint stores them")
    return (f"Weights ran at one precision each ({'; '.join(parts)}; model {config.model.name}): another dtype "
            "or quantization (BF16, FP8, INT4, another GGUF) is another experiment.")


def _nodes(specs: list, summary: RunSummary) -> str:
    """What one replica on one node cannot judge, whatever the engines' results (docs/PROTOCOL.md, "What
    DayOne cannot judge", says what judging it would take)."""
    shapes = ", ".join(f"{s.name} TP{s.tp} on {s.gpus} GPU(s)" for s in specs)
    return (f"Each engine ran as one replica on a single node ({shapes}): DayOne cannot judge prefill/decode "
            "disaggregation, RDMA (the KV cache moved between GPUs or nodes over InfiniBand or RoCE) or "
            "multi-node topologies (tensor, pipeline or expert parallelism across nodes), so nothing here "
            "says how these engines serve in them.")


def _gpus(ready: list[str], summary: RunSummary) -> str:
    products = sorted({h.gpu_product for n in ready if (h := summary.engines[n].hardware) and h.gpu_product})
    if not products:
        return ("No GPU product was recorded for the engines: the figures cannot be placed on any hardware "
                "beyond this run's.")
    return (f"Only on {', '.join(products)}: other GPU products, drivers and runtimes (another generation, "
            "ROCm) were not tested.")


def _image(ready: list[str], summary: RunSummary) -> str:
    passed = [n for n in ready if summary.engines[n].checks.get("image_input") == "pass"]
    return f" ({', '.join(passed)})" if passed else " (none here)"


def _context(config: RunConfig, summary: RunSummary, ready: list[str]) -> str | None:
    limit = config.model.context_limit_tokens
    if not config.scenarios.long_context.enabled:
        return f"Long context was not tested: nothing here shows an engine serving prompts near {limit:,} tokens."
    reached = [max((r.target_tokens for r in summary.engines[n].long_context if r.passed), default=0) for n in ready]
    longest = max(reached, default=0)
    margin = config.model.template_overhead_tokens + config.scenarios.long_context.output_tokens
    if longest and longest >= limit - margin:
        return None
    what = f"up to {longest:,} tokens" if longest else "not retrieved at any length"
    return (f"The model's {limit:,}-token context was not reached: needles were retrieved {what}; the rest "
            "of the window is unproven.")


def _client(config: RunConfig) -> str:
    """Which real client stood in front of the engines (docs/PROTOCOL.md, "OpenWebUI"), or that none did."""
    if not config.scenarios.openwebui.enabled:
        return ("No real client stood in front of the engines (scenarios.openwebui is off): that a person's "
                "chat lists the model, streams the answer and shows reasoning apart is unproven.")
    return ("OpenWebUI was the one real client tried (its model list, a two-turn chat, its reasoning display): "
            "other frontends may read the reasoning fields differently.")


def _answers(config: RunConfig, summary: RunSummary, ready: list[str]) -> str:
    """What the answer checks covered (docs/PROTOCOL.md, "Answers"), or that answers were not checked."""
    quality = config.scenarios.quality
    checked = [n for n in ready if summary.engines[n].quality is not None]
    if not quality.enabled or not checked:
        why = "scenarios.quality is off" if not quality.enabled else "the quality step produced no verdicts"
        return (f"Answers were not checked ({why}): nothing here shows the engines answer right, and a fast "
                "engine may answer wrong.")
    lengths = ", ".join(f"{n:,}" for n in quality.kv_context_tokens)
    families = sorted({f for n in checked for f in summary.engines[n].quality.families})
    unchecked = [n for n in ready if n not in checked]
    text = (f"Answers were checked for {', '.join(checked)} on a generated task set ({', '.join(families)}; "
            f"key-value retrieval at {lengths} tokens; {quality.items_per_family} items per family, seed "
            f"{quality.seed}"
            + (f"; and the user's eval set {quality.eval_set} as the family eval_set" if quality.eval_set else "")
            + ") at greedy decoding: "
            + ("not prompts outside the eval set, " if quality.eval_set else "not the user's own prompts, ")
            + "not sampled decoding, and not open-ended quality (the generated items are easy on purpose)")
    if unchecked:
        text += f"; the answers of {', '.join(unchecked)} were not checked"
    return text + "." + _likelihood(summary, ready)


def _likelihood(summary: RunSummary, ready: list[str]) -> str:
    """Which engines' log-likelihood was compared, at which lengths, and which had no prompt log-probabilities."""
    points = [p for p in (summary.parity.nll if summary.parity else []) if p.engine in ready]
    if not points:
        return ""
    scored = sorted({p.engine for p in points if p.status == "ok"})
    lengths = ", ".join(f"{n:,}" for n in sorted({p.length_tokens for p in points if p.status == "ok"}))
    missing = sorted({f"{p.engine} ({p.reason})" for p in points if p.status == "not_applicable"})
    text = (f" Log-likelihood parity compared {', '.join(scored)} on one generated text at {lengths} tokens"
            if scored else " Log-likelihood parity compared no engine")
    return text + (f"; not for {'; '.join(missing)}" if missing else "") + "."


def _max_concurrency(summary: RunSummary, ready: list[str]) -> int | None:
    levels = [lv.concurrency for n in ready for p in summary.engines[n].perf.values() for lv in p.levels
              if lv.concurrency]
    return max(levels, default=None)
