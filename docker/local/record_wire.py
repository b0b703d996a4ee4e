"""Record a real vLLM server's wire as fixtures: one file per exchange (JSON: the request, the status, the
headers of interest, the body or the raw SSE `data:` lines in order; .txt for the metrics exposition, the
startup log up to "Application startup complete." and its route list), scrubbed of this machine's paths,
host name and addresses.

    python docker/local/record_wire.py --base-url http://127.0.0.1:PORT --out tests/fixtures/wire/vllm-0.32.0 \
        [--startup-log LOG] [--model-dir DIR]

The server is docker/local/vllm_serve.sh's (VLLM_SERVER_DEV_MODE=1, --enable-prefix-caching,
--enable-prompt-tokens-details, --tool-call-parser hermes --enable-auto-tool-choice, --max-model-len 2048).
Requests run one at a time (one busy-clear test runs a stream beside a clear); a few hundred generated
tokens in all. facts.json sums up what the transcripts show (docs/engine-facts-vllm.md reads it).
Needs only httpx (the vLLM environment has it).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import socket
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

MODEL_PLACEHOLDER = "/models/SmolLM2-135M-Instruct"
SYSTEM_ENV_KEPT = ("torch_version", "is_cuda_available", "cuda_runtime_version", "pip_packages")
HEADERS_OF_INTEREST = ("content-type", "content-length", "transfer-encoding", "x-request-id", "server")
# tasks/checks/tool_call.py's tool (no "strict": vLLM 0.32 then pins the call, not its argument schema) ...
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]
# ... and the same tool with "strict": true (argument schema enforced by the structural tag).
STRICT_TOOLS = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True, "parameters": {
    **TOOLS[0]["function"]["parameters"], "additionalProperties": False}}}]
WEATHER_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
# SmolLM2's chat template does not render tools, so the model never sees them: for tool_choice auto it calls
# one only when shown the hermes format in the conversation (three earlier turns).
_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
FEW_SHOT = [{"role": "system", "content": "You call tools. Answer only with a <tool_call> block."}]
for _city in ("London", "Berlin", "Madrid"):
    FEW_SHOT += [{"role": "user", "content": f"What is the weather in {_city} right now?"},
                 {"role": "assistant", "content": _CALL % _city}]
FEW_SHOT += [{"role": "user", "content": "What is the weather in Paris right now?"}]
# ~1,200 tokens of plain text for the prefix-cache trial (the CPU build's KV blocks are 128 tokens).
LONG_PROMPT = " ".join(
    f"Paragraph {i}: the lighthouse keeper counted {i * 7} ships in the harbour, wrote the number in the log, "
    f"and watched the tide turn at {i % 12 + 1} o'clock." for i in range(40)) + "\nSummarise the log in one sentence."

def png_red_64x32() -> str:
    """The image_input check's image (tasks/checks/image_input.py): a solid red 64x32 PNG, base64."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes((220, 20, 20)) * 64
    header = struct.pack(">IIBBBBB", 64, 32, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * 32)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


class Recorder:
    def __init__(self, base_url: str, out: Path, model_dir: str | None) -> None:
        self.base = base_url.rstrip("/")
        self.out = out
        self.client = httpx.Client(timeout=300)
        self.model_dir = model_dir
        self.model = ""
        self.facts: dict[str, Any] = {}
        self.scrubs: list[tuple[str, str]] = []
        self.patterns: list[tuple[re.Pattern[str], str]] = []

    # ---- scrubbing ------------------------------------------------------------------
    def add_scrubs(self) -> None:
        host = socket.gethostname()
        for path in sorted({p for p in (self.model_dir,) if p}, key=len, reverse=True):
            self.scrubs.append((path.rstrip("/"), MODEL_PLACEHOLDER))
        self.scrubs.append((str(Path.home()), "/home/user"))
        if host and host != "localhost":
            self.patterns.append((re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w-])"), "<hostname>"))
        try:  # this machine's own addresses, IPv6 ones included
            found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5, check=False).stdout.split()
        except (OSError, subprocess.SubprocessError):
            found = []
        for addr in found:
            if addr not in ("127.0.0.1", "::1"):
                self.scrubs.append((addr, "<ip>"))
        port = httpx.URL(self.base).port
        if port:
            self.scrubs.append((f"127.0.0.1:{port}", "127.0.0.1:8000"))
            self.scrubs.append((f"port={port}", "port=8000"))
            self.scrubs.append((f'"port": {port}', '"port": 8000'))
            self.scrubs.append((f"--port {port}", "--port 8000"))
            self.scrubs.append((f"'port': {port}", "'port': 8000"))

    def scrub(self, text: str) -> str:
        for old, new in self.scrubs:
            text = text.replace(old, new)
        for pattern, new in self.patterns:
            text = pattern.sub(new, text)
        # Every IPv4 address but loopback and the wildcard.
        return re.sub(r"\b(?!127\.0\.0\.1\b)(?!0\.0\.0\.0\b)\d{1,3}(?:\.\d{1,3}){3}\b", "<ip>", text)

    @staticmethod
    def trim_system_env(rec: dict[str, Any]) -> None:
        """/server_info's system_env describes this machine (CPU flags, kernel, env vars): keep what matters."""
        body = rec.get("body")
        env = body.get("system_env") if isinstance(body, dict) else None
        if isinstance(env, dict):
            kept = {k: env[k] for k in SYSTEM_ENV_KEPT if k in env}
            kept["<left out>"] = f"{len(env) - len(kept)} more keys describing the recording machine"
            body["system_env"] = kept

    def write(self, name: str, data: Any) -> None:
        path = self.out / name
        text = data if isinstance(data, str) else json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        path.write_text(self.scrub(text))
        print(f"  wrote {path.name}")

    # ---- exchanges ------------------------------------------------------------------
    @staticmethod
    def headers(r: httpx.Response) -> dict[str, str]:
        return {k: r.headers[k] for k in HEADERS_OF_INTEREST if k in r.headers}

    def exchange(self, name: str, method: str, path: str, body: Any = None, note: str = "",
                 query: str = "") -> dict[str, Any]:
        """One plain request; the record (also written to NAME.json) with body parsed when it is JSON."""
        sent = time.perf_counter()
        r = self.client.request(method, self.base + path + query, json=body)
        elapsed = time.perf_counter() - sent
        try:
            parsed: Any = r.json()
        except ValueError:
            parsed = None
        rec = {"request": {"method": method, "path": path + query, **({"json": body} if body is not None else {})},
               "status": r.status_code, "headers": self.headers(r), "elapsed_s": round(elapsed, 4)}
        if parsed is not None:
            rec["body"] = parsed
        else:
            rec["body_text"] = r.text
        if note:
            rec["note"] = note
        if path == "/server_info":
            self.trim_system_env(rec)
        self.write(name + ".json", rec)
        return rec

    def stream(self, name: str, path: str, body: dict[str, Any], note: str = "", write: bool = True,
               headers: dict[str, str] | None = None) -> dict[str, Any]:
        """One streamed request; the raw `data:` lines in order, with each one's arrival time."""
        lines: list[str] = []
        times: list[float] = []
        sent = time.perf_counter()
        sent_headers = headers or {}
        with self.client.stream("POST", self.base + path, json=body, headers=sent_headers) as r:
            status, headers = r.status_code, self.headers(r)
            if status != 200:
                r.read()
                rec = {"request": {"method": "POST", "path": path, "json": body}, "status": status,
                       "headers": headers, "body_text": r.text}
                try:
                    rec["body"] = r.json()
                    del rec["body_text"]
                except ValueError:
                    pass
                if write:
                    self.write(name + ".json", rec)
                return rec
            for line in r.iter_lines():
                if line.startswith("data:"):
                    lines.append(line)
                    times.append(round(time.perf_counter() - sent, 4))
                elif line.strip():
                    lines.append(line)  # a non-data line (none expected): kept, in place
                    times.append(round(time.perf_counter() - sent, 4))
        rec = {"request": {"method": "POST", "path": path, "json": body, **({"headers": sent_headers} if sent_headers else {})},
               "status": status, "headers": headers, "sse_data_lines": lines, "arrival_s": times}
        if note:
            rec["note"] = note
        if write:
            self.write(name + ".json", rec)
        return rec

    def metrics(self) -> str:
        return self.client.get(self.base + "/metrics").text

    @staticmethod
    def metric_values(text: str, names: list[str]) -> dict[str, float | None]:
        """Each name's value summed over its label sets (None when absent): a plain text read."""
        out: dict[str, float | None] = {}
        for name in names:
            total, seen = 0.0, False
            for line in text.splitlines():
                if line.startswith((name + "{", name + " ")):
                    total += float(line.rsplit(" ", 1)[1])
                    seen = True
            out[name] = total if seen else None
        return out

    # ---- the recording ----------------------------------------------------------------
    def run(self, startup_log: Path | None) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        models = self.client.get(self.base + "/v1/models").json()
        card = models["data"][0]
        self.model = card["id"]
        self.model_dir = self.model_dir or card.get("root")
        self.add_scrubs()
        self.exchange("health", "GET", "/health")
        self.exchange("models", "GET", "/v1/models")
        self.facts["models"] = {k: card.get(k) for k in ("id", "object", "owned_by", "root", "parent", "max_model_len")}
        self.facts["models"]["root"] = self.scrub(str(card.get("root")))
        m = self.model
        version = self.client.get(self.base + "/version")
        self.facts["version"] = version.json() if version.status_code == 200 else version.status_code
        self.exchange("version", "GET", "/version")

        info = self.exchange("server_info", "GET", "/server_info", query="?config_format=json")
        vc = (info.get("body") or {}).get("vllm_config")
        self.facts["server_info"] = {
            "status": info["status"], "top_keys": sorted((info.get("body") or {}).keys()),
            "vllm_config_type": type(vc).__name__,
            "model_config.revision": (vc or {}).get("model_config", {}).get("revision", "<absent>")
            if isinstance(vc, dict) else "<not a dict>",
            "cache_config.block_size": (vc or {}).get("cache_config", {}).get("block_size")
            if isinstance(vc, dict) else None}
        text_info = self.exchange("server_info_text", "GET", "/server_info")
        body = text_info.get("body") or {}
        self.facts["server_info_text"] = {"vllm_config_type": type(body.get("vllm_config")).__name__,
                                          "revision_in_text": bool(re.search(r"\brevision=", str(body.get("vllm_config"))))}

        chat_msgs = [{"role": "user", "content": "What is the capital of France?"}]
        self.exchange("chat", "POST", "/v1/chat/completions",
                      {"model": m, "messages": chat_msgs, "max_tokens": 16, "temperature": 0})
        s = self.stream("chat_stream_usage", "/v1/chat/completions",
                        {"model": m, "messages": chat_msgs, "max_tokens": 16, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
        self.facts["chat_stream"] = stream_shape(s)
        s2 = self.stream("chat_stream", "/v1/chat/completions",
                         {"model": m, "messages": chat_msgs, "max_tokens": 8, "temperature": 0, "stream": True})
        self.facts["chat_stream_without_usage"] = stream_shape(s2)
        s3 = self.stream("chat_stream_continuous_usage", "/v1/chat/completions",
                         {"model": m, "messages": chat_msgs, "max_tokens": 4, "temperature": 0, "stream": True,
                          "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
        self.facts["chat_stream_continuous_usage"] = stream_shape(s3)

        prompt = "The lighthouse keeper counted the ships and wrote"
        self.exchange("completions", "POST", "/v1/completions",
                      {"model": m, "prompt": prompt, "max_tokens": 8, "temperature": 0})
        s = self.stream("completions_stream_usage", "/v1/completions",
                        {"model": m, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
        self.facts["completions_stream"] = stream_shape(s)
        # Ends on EOS (finish_reason stop), and carries DayOne's X-Request-Id (tasks/evidence/stream.py sends one).
        s = self.stream("completions_stream_stop_request_id", "/v1/completions",
                        {"model": m, "max_tokens": 30, "temperature": 0, "stream": True,
                         "prompt": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
                        headers={"X-Request-Id": "dayone-0123456789abcdef"})
        self.facts["completions_stream_stop_request_id"] = {
            **stream_shape(s), "x-request-id_header_echoed": "x-request-id" in s.get("headers", {})}
        # The benchmarks' shape: a token-ID prompt, the output length forced (tasks/load/plan.py completion_body,
        # VLLMAdapter.exact_output_fields).
        s = self.stream("completions_stream_token_ids_forced", "/v1/completions",
                        {"model": m, "prompt": [504, 1695, 3029, 1402, 2015, 260, 6034, 284, 2418],
                         "max_tokens": 8, "min_tokens": 8, "ignore_eos": True, "temperature": 0, "stream": True,
                         "stream_options": {"include_usage": True}})
        self.facts["completions_stream_token_ids_forced"] = stream_shape(s)
        echo = self.exchange("completions_echo_logprobs", "POST", "/v1/completions",
                             {"model": m, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1,
                              "temperature": 0})
        self.facts["echo_logprobs"] = echo_shape(echo)
        self.exchange("completions_echo_false", "POST", "/v1/completions",
                      {"model": m, "prompt": prompt, "echo": False, "max_tokens": 4, "temperature": 0})
        pl = self.exchange("completions_prompt_logprobs", "POST", "/v1/completions",
                           {"model": m, "prompt": prompt, "prompt_logprobs": 0, "max_tokens": 1, "temperature": 0})
        self.facts["completions_prompt_logprobs"] = prompt_logprobs_shape(pl)
        cpl = self.exchange("chat_prompt_logprobs", "POST", "/v1/chat/completions",
                            {"model": m, "messages": chat_msgs, "prompt_logprobs": 0, "max_tokens": 1, "temperature": 0})
        self.facts["chat_prompt_logprobs"] = prompt_logprobs_shape(cpl)

        tok = self.exchange("tokenize", "POST", "/tokenize", {"model": m, "prompt": "Hello world, hello lighthouse."})
        tokm = self.exchange("tokenize_messages", "POST", "/tokenize", {"model": m, "messages": chat_msgs})
        self.exchange("detokenize", "POST", "/detokenize", {"model": m, "tokens": (tok.get("body") or {}).get("tokens", [])})
        self.facts["tokenize"] = {"status": tok["status"], "keys": sorted((tok.get("body") or {}).keys()),
                                  "messages_status": tokm["status"],
                                  "messages_count": (tokm.get("body") or {}).get("count")}

        # Structured output and tools.
        schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                  "required": ["city", "country"], "additionalProperties": False}
        so = self.exchange("structured_json_schema", "POST", "/v1/chat/completions", {
            "model": m, "messages": [{"role": "user", "content": "Give the capital of France as JSON."}],
            "max_tokens": 48, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}}})
        self.facts["structured_json_schema"] = message_shape(so)
        odd = {"type": "object", "properties": {"population_millions": {"type": "integer"},
                                                "colour": {"type": "string", "enum": ["zz-red", "zz-blue"]}},
               "required": ["population_millions", "colour"], "additionalProperties": False}
        so2 = self.exchange("structured_json_schema_unnatural", "POST", "/v1/chat/completions", {
            "model": m, "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
            "max_tokens": 64, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "odd", "schema": odd}}},
            note="a schema the model would not follow unconstrained: its keys and enum show the grammar applies")
        self.facts["structured_json_schema_unnatural"] = message_shape(so2)
        weather = [{"role": "user", "content": WEATHER_PROMPT}]
        named = {"type": "function", "function": {"name": "get_weather"}}
        cases = (  # (name, messages, tools, tool_choice, streamed)
            ("tool_forced", weather, STRICT_TOOLS, named, False),
            ("tool_forced_stream", weather, STRICT_TOOLS, named, True),
            ("tool_forced_not_strict", weather, TOOLS, named, False),
            ("tool_required", weather, STRICT_TOOLS, "required", False),
            ("tool_auto", weather, TOOLS, "auto", False),  # the tool_call check's request, verbatim
            ("tool_auto_few_shot", FEW_SHOT, TOOLS, "auto", False),
            ("tool_auto_few_shot_stream", FEW_SHOT, TOOLS, "auto", True),
        )
        for name, messages, tools, choice, streamed in cases:
            body = {"model": m, "messages": messages, "max_tokens": 64, "temperature": 0, "tools": tools,
                    "tool_choice": choice}
            if streamed:
                self.facts[name] = stream_shape(self.stream(name, "/v1/chat/completions", {**body, "stream": True}))
                self.facts[name]["tool_call_deltas"] = tool_deltas(self.out / f"{name}.json")
            else:
                self.facts[name] = message_shape(self.exchange(name, "POST", "/v1/chat/completions", body))

        img = self.exchange("image_input", "POST", "/v1/chat/completions", {
            "model": m, "max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is the main colour of this image? Answer in one word."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_red_64x32()}}]}]})
        self.facts["image_input"] = {"status": img["status"], "body": img.get("body") or img.get("body_text")}

        # Past the context: a prompt longer than max_model_len, and one that fits but whose max_tokens does not.
        limit = int(card.get("max_model_len") or 2048)
        too_long = "hello " * (limit + 50)
        over = self.exchange("context_overflow_completions", "POST", "/v1/completions",
                             {"model": m, "prompt": too_long, "max_tokens": 8})
        over_chat = self.exchange("context_overflow_chat", "POST", "/v1/chat/completions",
                                  {"model": m, "messages": [{"role": "user", "content": too_long}], "max_tokens": 8})
        over_max = self.exchange("context_overflow_max_tokens", "POST", "/v1/completions",
                                 {"model": m, "prompt": "hello " * (limit - 40), "max_tokens": 100,
                                  "temperature": 0},
                                 note="the prompt fits, prompt + max_tokens does not")
        over_limit = self.exchange("context_overflow_max_tokens_over_limit", "POST", "/v1/completions",
                                   {"model": m, "prompt": "hi", "max_tokens": limit + 1})
        hello = (self.client.post(self.base + "/tokenize", json={"model": m, "prompt": " hello"}).json()
                 .get("tokens") or [33662])[-1:]
        exact = self.exchange("context_prompt_exactly_limit", "POST", "/v1/completions",
                              {"model": m, "prompt": hello * limit, "max_tokens": 8, "temperature": 0},
                              note=f"a token-ID prompt of exactly max_model_len ({limit}) tokens")
        one_less = self.exchange("context_prompt_limit_minus_one", "POST", "/v1/completions",
                                 {"model": m, "prompt": hello * (limit - 1), "max_tokens": 8, "temperature": 0},
                                 note=f"a token-ID prompt of max_model_len - 1 ({limit - 1}) tokens, max_tokens 8")
        over_stream = self.stream("context_overflow_stream", "/v1/chat/completions",
                                  {"model": m, "messages": [{"role": "user", "content": too_long}], "max_tokens": 8,
                                   "stream": True})
        self.facts["context_overflow"] = {r_name: {"status": r["status"], "body": r.get("body") or r.get("body_text")}
                                          for r_name, r in (("completions", over), ("chat", over_chat),
                                                            ("max_tokens", over_max), ("chat_stream", over_stream),
                                                            ("max_tokens_over_limit", over_limit),
                                                            ("prompt_exactly_limit", exact),
                                                            ("prompt_limit_minus_one", one_less))}
        for case in ("max_tokens", "prompt_limit_minus_one"):  # a 200 here: keep only what tells
            got = self.facts["context_overflow"][case]
            if got["status"] == 200 and isinstance(got["body"], dict):
                got["body"] = {"usage": got["body"].get("usage"),
                               "finish_reason": got["body"]["choices"][0].get("finish_reason")}
        unknown = self.exchange("unknown_model", "POST", "/v1/completions",
                                {"model": "no-such-model", "prompt": "hi", "max_tokens": 1})
        self.facts["unknown_model"] = {"status": unknown["status"], "body": unknown.get("body")}

        self.prefix_cache_trial()
        self.reset_trials()

        names = ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
                 "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_requests_running",
                 "vllm:request_queue_time_seconds_count", "vllm:time_to_first_token_seconds_count",
                 "vllm:inter_token_latency_seconds_count", "vllm:e2e_request_latency_seconds_count",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
                 "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "process_start_time_seconds"]
        text = self.metrics()
        self.write("metrics_after_traffic.txt", text)
        self.facts["metrics"] = self.metric_values(text, names)
        self.facts["metric_types"] = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
        self.facts["metric_labels_example"] = next(
            (line.split(" ")[0] for line in text.splitlines() if line.startswith("vllm:num_requests_running")), None)

        if startup_log is not None:
            full = startup_log.read_text(errors="replace")
            end = full.find("Application startup complete.")
            startup = full[: full.find("\n", end) + 1] if end >= 0 else full
            lines = startup.splitlines()
            routes = [line.split("Route: ", 1)[1] for line in lines if "Route: " in line]
            kept = [line for line in lines if "Route: " not in line and line.strip()]  # all of the startup
            self.write("startup_log.txt", "\n".join(kept) + "\n")
            self.write("routes.txt", "\n".join(routes) + "\n")
            self.facts["startup_regexes"] = {
                name: (m.group(0) if (m := re.search(rx, full)) else None) for name, rx in (
                    ("KV_TOKENS", r"GPU KV cache size: (?P<tokens>[\d,]+) tokens"),
                    ("MAX_CONCURRENCY", r"Maximum concurrency for (?P<context>[\d,]+) tokens per request: (?P<times>[\d.]+)x"),
                    ("KV_MEMORY", r"Available KV cache memory: (?P<gib>[\d.]+) GiB"),
                    ("WEIGHTS", r"(?:Model loading|Loading model weights) took (?P<gib>[\d.]+) Gi?B\b"))}
        self.write("facts.json", self.facts)

    def prefix_cache_trial(self) -> None:
        """A ~1,200-token prompt twice after a clear: counters, cached_tokens and TTFT, cold then hot."""
        m = self.model
        counters = ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"]
        self.client.post(self.base + "/reset_prefix_cache")
        n = self.client.post(self.base + "/tokenize", json={"model": m, "prompt": LONG_PROMPT}).json().get("count")
        rounds = []
        for label in ("cold", "hot"):
            before = self.metric_values(self.metrics(), counters)
            s = self.stream(f"prefix_cache_{label}", "/v1/completions", {
                "model": m, "prompt": LONG_PROMPT, "max_tokens": 4, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}})
            after = self.metric_values(self.metrics(), counters)
            shape = stream_shape(s)
            first_text = next((t for line, t in zip(s["sse_data_lines"], s["arrival_s"])
                               if _text_of(line)), None)
            rounds.append({"round": label, "ttft_s": first_text, "usage": shape.get("usage"),
                           "counters_before": before, "counters_after": after,
                           "queries_delta": _delta(before, after, counters[0]),
                           "hits_delta": _delta(before, after, counters[1])})
        chat_rounds = []
        for label in ("cold_chat_non_stream", "hot_chat_non_stream"):
            if label.startswith("cold"):
                self.client.post(self.base + "/reset_prefix_cache")
            r = self.client.post(self.base + "/v1/chat/completions", json={
                "model": m, "messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 4, "temperature": 0})
            chat_rounds.append({"round": label, "usage": r.json().get("usage")})
        self.facts["prefix_cache"] = {"prompt_tokens_by_tokenize": n, "completions_stream": rounds,
                                      "chat": chat_rounds}
        self.write("prefix_cache_trial.json", {"prompt_tokens_by_tokenize": n, "completions_stream": rounds,
                                               "chat": chat_rounds})

    def reset_trials(self) -> None:
        """POST /reset_prefix_cache idle, and while a long stream runs (caught after its first event)."""
        idle = self.exchange("reset_prefix_cache_idle", "POST", "/reset_prefix_cache")
        busy: dict[str, Any] = {}
        started = threading.Event()

        def long_stream() -> None:
            body = {"model": self.model, "prompt": LONG_PROMPT, "max_tokens": 200, "min_tokens": 200,
                    "ignore_eos": True, "temperature": 0, "stream": True}
            with self.client.stream("POST", self.base + "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        started.set()
            busy["stream_done"] = True

        t = threading.Thread(target=long_stream)
        t.start()
        started.wait(120)
        time.sleep(0.3)
        running = self.metric_values(self.metrics(), ["vllm:num_requests_running"])
        rec = self.exchange("reset_prefix_cache_busy", "POST", "/reset_prefix_cache",
                            note="sent while a 200-token completions stream was running "
                                 f"(vllm:num_requests_running={running['vllm:num_requests_running']})")
        t.join()
        again = self.exchange("reset_prefix_cache_after_busy", "POST", "/reset_prefix_cache")
        reset_query = self.exchange("reset_prefix_cache_reset_running", "POST", "/reset_prefix_cache",
                                    query="?reset_running_requests=true")
        get = self.exchange("reset_prefix_cache_get", "GET", "/reset_prefix_cache")
        self.facts["reset_prefix_cache"] = {
            "idle": {"status": idle["status"], "body": idle.get("body", idle.get("body_text"))},
            "busy": {"status": rec["status"], "body": rec.get("body", rec.get("body_text")),
                     "num_requests_running": running["vllm:num_requests_running"]},
            "after": {"status": again["status"], "body": again.get("body", again.get("body_text"))},
            "reset_running_requests=true": {"status": reset_query["status"],
                                            "body": reset_query.get("body", reset_query.get("body_text"))},
            "GET": {"status": get["status"]}}


def _delta(before: dict[str, float | None], after: dict[str, float | None], name: str) -> float | None:
    b, a = before.get(name), after.get(name)
    return None if a is None or b is None else a - b


def _text_of(line: str) -> str:
    data = line[5:].strip()
    if data == "[DONE]":
        return ""
    try:
        chunk = json.loads(data)
    except ValueError:
        return ""
    out = ""
    for c in chunk.get("choices") or []:
        d = c.get("delta") or {}
        out += c.get("text") or d.get("content") or ("tool" if d.get("tool_calls") else "")
    return out


def stream_shape(rec: dict[str, Any]) -> dict[str, Any]:
    """What a stream's events look like: the first, the one with finish_reason, the usage one, delta keys."""
    if rec.get("status") != 200:
        return {"status": rec.get("status"), "body": rec.get("body") or rec.get("body_text")}
    chunks = []
    done = False
    for line in rec["sse_data_lines"]:
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        chunks.append(json.loads(data))
    delta_keys: set[str] = set()
    choice_keys: set[str] = set()
    for c in chunks:
        for ch in c.get("choices") or []:
            choice_keys |= set(ch)
            delta_keys |= set(ch.get("delta") or {})
    first = chunks[0] if chunks else {}
    finish = [i for i, c in enumerate(chunks) if any(ch.get("finish_reason") for ch in c.get("choices") or [])]
    usage_idx = [i for i, c in enumerate(chunks) if c.get("usage")]
    return {
        "events": len(chunks), "done": done,
        "first_event": first,
        "finish_reason_event_index": finish, "finish_reason_event": chunks[finish[0]] if finish else None,
        "usage_event_indexes": usage_idx,
        "last_event": chunks[-1] if chunks else None,
        "usage": chunks[usage_idx[-1]]["usage"] if usage_idx else None,
        "usage_event_choices": chunks[usage_idx[-1]].get("choices") if usage_idx else None,
        "usage_key_in_other_events": sorted({repr(c.get("usage")) for i, c in enumerate(chunks)
                                             if i not in usage_idx and "usage" in c}),
        "delta_keys": sorted(delta_keys), "choice_keys": sorted(choice_keys),
        "reasoning_keys_present": sorted(delta_keys & {"reasoning", "reasoning_content"}),
    }


def tool_deltas(path: Path) -> list[Any]:
    """The tool_calls fragments of a recorded stream, in order."""
    rec = json.loads(path.read_text())
    out = []
    for line in rec.get("sse_data_lines") or []:
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        for ch in json.loads(data).get("choices") or []:
            if (ch.get("delta") or {}).get("tool_calls"):
                out.append(ch["delta"]["tool_calls"])
    return out


def echo_shape(rec: dict[str, Any]) -> dict[str, Any]:
    body = rec.get("body") or {}
    try:
        choice = body["choices"][0]
        lp = choice["logprobs"]
    except (KeyError, IndexError, TypeError):
        return {"status": rec["status"], "body": body}
    return {"status": rec["status"], "prompt_tokens": (body.get("usage") or {}).get("prompt_tokens"),
            "token_logprobs_len": len(lp.get("token_logprobs") or []),
            "token_logprobs_first3": (lp.get("token_logprobs") or [])[:3],
            "tokens_first3": (lp.get("tokens") or [])[:3], "logprobs_keys": sorted(lp),
            "top_logprobs_first2": (lp.get("top_logprobs") or [])[:2],
            "text_starts_with_prompt": str(choice.get("text", "")).startswith("The lighthouse keeper"),
            "has_prompt_logprobs_key": "prompt_logprobs" in choice or "prompt_logprobs" in body}


def prompt_logprobs_shape(rec: dict[str, Any]) -> dict[str, Any]:
    body = rec.get("body") or {}
    out: dict[str, Any] = {"status": rec["status"]}
    if rec["status"] != 200:
        out["body"] = body or rec.get("body_text")
        return out
    where = [k for k in ("prompt_logprobs",) if k in body]
    choice = (body.get("choices") or [{}])[0]
    where += [f"choices[0].{k}" for k in ("prompt_logprobs",) if k in choice]
    out["where"] = where
    pl = body.get("prompt_logprobs", choice.get("prompt_logprobs"))
    out["first3"] = pl[:3] if isinstance(pl, list) else pl
    out["len"] = len(pl) if isinstance(pl, list) else None
    out["prompt_tokens"] = (body.get("usage") or {}).get("prompt_tokens")
    return out


def message_shape(rec: dict[str, Any]) -> dict[str, Any]:
    body = rec.get("body") or {}
    if rec["status"] != 200:
        return {"status": rec["status"], "body": body or rec.get("body_text")}
    choice = body["choices"][0]
    return {"status": 200, "finish_reason": choice.get("finish_reason"), "message": choice.get("message")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--startup-log", type=Path, default=None, help="the server's log, for startup_log.txt")
    ap.add_argument("--model-dir", default=None, help="the served model's directory (default: /v1/models root)")
    args = ap.parse_args()
    Recorder(args.base_url, args.out, args.model_dir).run(args.startup_log)


if __name__ == "__main__":
    main()
