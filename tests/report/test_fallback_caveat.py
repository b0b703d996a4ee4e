"""The caveat that fallbacks cap performance (docs/PROTOCOL.md, "Startup findings"): a startup log with a missing
tuned kernel config and a fallback attention backend (the Day-1 report's vLLM on H20) puts a line in the
decision saying that engine's figures are not its ceiling; an engine whose log shows neither gets none."""

from __future__ import annotations

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.documents import set_readiness
from tasks.state.storage import RunDir
from tasks.steps.engine_steps import startup_finding_rows

PLANTED = {
    "vllm": "\n".join([
        "INFO 11-30 08:00:01 [model.py:1502] Using max model len 1048576",
        "WARNING 11-30 08:01:12 [fused_moe.py:727] Using default MoE config. Performance might be sub-optimal! "
        "Config file not found at E=288,N=512,device_name=NVIDIA_H20.json",
        "WARNING 11-30 08:01:13 [mla.py:88] There is no MLA prefill backend for this model, falling back to the "
        "Top-k MQA path",
        "INFO 11-30 08:09:40 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000"]),
    "sglang": "\n".join([
        "[2026-11-30 08:00:02] Load weight end. type=Glm5ForCausalLM, dtype=torch.float8_e4m3fn, mem usage=75.12 GB.",
        "[2026-11-30 08:02:40] The server is fired up and ready to roll!"]),
}


def test_a_planted_fallback_puts_the_ceiling_caveat_in_the_decision(tmp_path):
    config = parse_run_config({"run_id": "fallback", "model": {"name": "m"},
                               "engines": [{"name": n, "dialect": n} for n in PLANTED]})
    run_dir = RunDir("fallback", root=tmp_path)
    for name, log in PLANTED.items():
        set_readiness(run_dir, name, True, "serving")
        ectx = EngineContext(config, endpoint_for(config, name, "http://127.0.0.1:9", "sha256:" + "0" * 64), run_dir)
        with run_dir.rows("startup_findings", name, "startup") as out:
            for row in startup_finding_rows(ectx, log):
                out.write(row)
    summary = build_summary(run_dir, config)
    caveats = [d.text for d in summary.decision if "not its ceiling" in d.text]
    assert len(caveats) == 1 and caveats[0].startswith("vllm's figures are not its ceiling on this hardware")
    (line,) = caveats
    assert "a missing tuned kernel config and a fallback backend" in line and "Using default MoE config" in line
    assert next(d.topic for d in summary.decision if d.text == line) == "reliability"
    assert not any(d.text.startswith("Startup warnings") and "fallback" in d.text for d in summary.decision)
    from markupsafe import escape

    assert str(escape(line)) in render_html(summary)
