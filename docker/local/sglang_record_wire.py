"""Record a real SGLang server's wire as fixtures: one file per exchange (JSON: the request, the status, the
headers of interest, the body or the raw SSE `data:` lines in order; .txt for the metrics exposition and the
startup log excerpt), scrubbed of this machine's paths, host name and addresses. facts.json sums up what the
transcripts show (docs/engine-facts-sglang.md reads it).

    python docker/local/sglang_record_wire.py --base-url http://127.0.0.1:PORT --out tests/fixtures/wire/sglang-0.5.18 \
        [--startup-log LOG] [--model-dir DIR] [--watch-startup] [--only NAME,...] [--tag TAG]

The server: docker/local/sglang_serve.sh MODEL_DIR PORT --revision main --tool-call-parser qwen25 (DayOne's launch
flags, tasks/engines/sglang.py launch_command, plus the CPU ones and --max-total-tokens 16384). With
--watch-startup the recorder is started right after the server and first records what /health, /ping and
/v1/models answer while it starts, and /metrics before any request. SmolLM2 does not reason: a second server
started with --reasoning-parser qwen3 too is recorded with `--only reasoning,chat,structured,tools --tag
reasoning-qwen3` into files named after the tag. Requests run one at a time, greedy, short (a few hundred
generated tokens in all; the CPU build makes 14 to 18 tokens/s alone); the busy-clear exchanges run a stream
beside a clear. Needs only httpx (the SGLang environment has it).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

MODEL_PLACEHOLDER = "/models/SmolLM2-135M-Instruct"
HEADERS_OF_INTEREST = ("content-type", "content-length", "transfer-encoding", "x-request-id", "server")
# The adapter's names (tasks/engines/sglang.py: cache_counters, round_metrics) and the simulator's
# (tasks/sim/dialects.py SGLANG.metric_names), checked against the real exposition.
DAYONE_METRICS = {
    "sglang:prompt_tokens_total": "counter", "sglang:cached_tokens_total": "counter",
    "sglang:generation_tokens_total": "counter", "sglang:num_requests_total": "counter",
    "sglang:num_retracted_requests_total": "counter", "sglang:num_running_reqs": "gauge",
    "sglang:num_queue_reqs": "gauge", "sglang:cache_hit_rate": "gauge", "sglang:token_usage": "gauge",
    "sglang:spec_accept_length": "gauge", "sglang:spec_accept_rate": "gauge",
    "sglang:queue_time_seconds": "histogram", "sglang:time_to_first_token_seconds": "histogram",
    "sglang:inter_token_latency_seconds": "histogram", "sglang:e2e_request_latency_seconds": "histogram",
}
# The adapter's startup regexes (tasks/engines/sglang.py) and the lines around them worth keeping.
TOKEN_POOL = re.compile(r"max_total_num_tokens=(?P<tokens>\d+),.*?context_len=(?P<context>\d+)")
KV_ALLOCATED = re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+), "
                          r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")
WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
STARTUP_KEEP = re.compile(
    r"server_args=|Load weight|KV Cache|max_total_num_tokens|context_len|mem usage|avail mem|memory|"
    r"attention backend|backend|fall|AMX|torch_native|cuda graph|graph|compil|JIT|autotun|config|"
    r"WARNING|ERROR|Uvicorn running|startup|ready to roll|The server is fired up|Init torch|"
    r"Capture|tokens|threads|numa|OMP|cpu|deprecat", re.IGNORECASE)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]
WEATHER_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."  # tasks/checks/tool_call.py
REASONING_PROMPT = "What is 17 + 25? Think it through step by step, then give the answer."  # reasoning_split
RAINBOW = "Name three colours of the rainbow."
ECHO_PROMPT = "DayOne echo probe Q7VZ: the lighthouse keeper counted the ships and wrote"  # completions_echo
# About 1,250 tokens of plain text for the prefix-cache trial.
LONG_PROMPT = " ".join(
    f"Paragraph {i}: the lighthouse keeper counted {i * 7} ships in the harbour, wrote the number in the log, "
    f"and watched the tide turn at {i % 12 + 1} o'clock." for i in range(34)) + "\nSummarise the log in one sentence."


def png_red_64x32() -> str:
    """The image_input check's image (tasks/checks/image_input.py): a solid red 64x32 PNG, base64."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes((220, 20, 20)) * 64
    header = struct.pack(">IIBBBBB", 64, 32, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * 32)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def shorten(value: Any, limit: int = 600) -> Any:
    """A request as recorded: long strings (a long prompt, an image) cut, saying how long they were."""
    if isinstance(value, str) and len(value) > limit:
        return value[:200] + f"... [{len(value)} chars]"
    if isinstance(value, list) and len(value) > 64 and all(isinstance(v, int) for v in value):
        return value[:16] + [f"... [{len(value)} token ids]"]
    if isinstance(value, dict):
        return {k: shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [shorten(v, limit) for v in value]
    return value


def scrape(text: str) -> dict[str, float]:
    """Sample name -> value summed over label sets (as tasks/evidence/metrics.py reads an exposition)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{.*\})?\s+(\S+)", line)
        if m:
            try:
                out[m[1]] = out.get(m[1], 0.0) + float(m[2])
            except ValueError:
                pass
    return out


class Recorder:
    def __init__(self, base_url: str, out: Path, model_dir: str | None, tag: str) -> None:
        self.base = base_url.rstrip("/")
        self.out = out
        self.client = httpx.Client(timeout=600)
        self.model_dir = model_dir
        self.tag = tag
        self.model = ""
        self.facts: dict[str, Any] = {}
        self.scrubs: list[tuple[str, str]] = []
        self.hostnames: list[str] = []

    # ---- scrubbing and files ------------------------------------------------------------
    def add_scrubs(self) -> None:
        for path in sorted({p.rstrip("/") for p in (self.model_dir,) if p}, key=len, reverse=True):
            self.scrubs.append((path, MODEL_PLACEHOLDER))
        self.scrubs.append((str(Path.home()), "/home/user"))
        self.hostnames = sorted({n for n in (socket.gethostname(), socket.getfqdn())
                                 if n and n not in ("localhost", "localhost.localdomain")}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for old, new in self.scrubs:
            text = text.replace(old, new)
        for name in self.hostnames:  # whole names only: a short host name is also part of other words
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "host", text)
        # any IPv4 address but loopback and the wildcard
        return re.sub(r"\b(?!127\.0\.0\.1\b)(?!0\.0\.0\.0\b)(?:\d{1,3}\.){3}\d{1,3}\b", "192.0.2.1", text)

    def name(self, stem: str) -> str:
        return f"{stem}.{self.tag}" if self.tag else stem

    def save(self, stem: str, obj: Any) -> None:
        path = self.out / f"{self.name(stem)}.json"
        path.write_text(self.scrub(json.dumps(obj, indent=1, ensure_ascii=False)) + "\n")
        print(f"  wrote {path.name}")

    def save_text(self, stem: str, text: str) -> None:
        path = self.out / f"{self.name(stem)}.txt"
        path.write_text(self.scrub(text))
        print(f"  wrote {path.name}")

    # ---- exchanges ------------------------------------------------------------------------
    def _headers(self, r: httpx.Response) -> dict[str, str]:
        return {k: r.headers[k] for k in HEADERS_OF_INTEREST if k in r.headers}

    @staticmethod
    def _body(r: httpx.Response) -> Any:
        try:
            return r.json()
        except ValueError:
            return r.text

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        sent = time.perf_counter()
        r = self.client.request(method, self.base + path, json=body)
        return {"request": {"method": method, "path": path, **({"body": shorten(body)} if body is not None else {})},
                "status": r.status_code, "headers": self._headers(r), "body": self._body(r),
                "elapsed_s": round(time.perf_counter() - sent, 3)}

    def stream(self, path: str, body: dict[str, Any], on_output: Callable[[], None] | None = None) -> dict[str, Any]:
        """A streamed POST: every `data:` line in order, and when the first event, the first output and the
        last came (output: content, reasoning or a tool-call fragment, as tasks/evidence/stream.py times it)."""
        body = {**body, "stream": True}
        lines: list[str] = []
        times: list[float] = []
        first_output = None
        sent = time.perf_counter()
        with self.client.stream("POST", self.base + path, json=body,
                                headers={"X-Request-Id": f"dayone-wire-{int(sent * 1000) % 10**9}"}) as r:
            status, headers = r.status_code, self._headers(r)
            if status != 200:
                r.read()
                return {"request": {"method": "POST", "path": path, "body": shorten(body)}, "status": status,
                        "headers": headers, "body": self._body(r)}
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                now = time.perf_counter() - sent
                lines.append(line)
                times.append(now)
                if first_output is None and self._has_output(line[5:].strip()):
                    first_output = now
                    if on_output:
                        on_output()
        return {"request": {"method": "POST", "path": path, "body": shorten(body)}, "status": status,
                "headers": headers, "sse": lines,
                "timing": {"first_event_s": round(times[0], 3) if times else None,
                           "first_output_s": round(first_output, 3) if first_output is not None else None,
                           "last_event_s": round(times[-1], 3) if times else None, "events": len(lines)}}

    @staticmethod
    def _has_output(data: str) -> bool:
        if data == "[DONE]":
            return False
        try:
            chunk = json.loads(data)
        except ValueError:
            return False
        if "text" in chunk and "meta_info" in chunk:  # /generate: cumulative text
            return bool(chunk["text"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if choice.get("text") or delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                return True
        return False

    @staticmethod
    def chunks(ex: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for line in ex.get("sse", []):
            data = line[5:].strip()
            if data != "[DONE]":
                try:
                    out.append(json.loads(data))
                except ValueError:
                    out.append({"unparsed": data})
        return out

    def metrics(self) -> str:
        return self.client.get(self.base + "/metrics").text

    def chat(self, content: Any, **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": [{"role": "user", "content": content}], "temperature": 0,
                "max_tokens": 48, **extra}

    # ---- the recording ------------------------------------------------------------------------
    def watch_startup(self, timeout_s: float = 300) -> None:
        """What the health, ping and model-list paths answer while the server starts, until /health is 200."""
        seen: list[dict[str, Any]] = []
        last: dict[str, Any] = {}
        started = time.perf_counter()
        while time.perf_counter() - started < timeout_s:
            now: dict[str, Any] = {}
            for path in ("/health", "/ping", "/v1/models"):
                try:
                    r = self.client.get(self.base + path, timeout=5)
                    now[path] = r.status_code
                    if r.status_code != 200:
                        now[path + " body"] = r.text[:200]
                except httpx.TransportError as exc:
                    now[path] = type(exc).__name__
            if now != last:
                seen.append({"t_s": round(time.perf_counter() - started, 1), **now})
                last = now
            if now.get("/health") == 200:
                break
            time.sleep(0.5)
        self.save("startup_health", {"note": "GET /health, /ping and /v1/models every 0.5 s from the server's start "
                                             "until /health answered 200; a row each time an answer changed",
                                     "transitions": seen})
        self.facts["health_200_after_s"] = seen[-1]["t_s"] if seen else None
        text = self.metrics()  # before any request but the server's own warm-up generation
        self.save_text("metrics_before_traffic", text)
        self.facts["metrics_before_traffic"] = {
            name: scrape(text).get(name, scrape(text).get(name + "_count")) for name in DAYONE_METRICS}

    def record(self, only: set[str]) -> None:
        self.add_scrubs()
        models = self.call("GET", "/v1/models")
        self.model = models["body"]["data"][0]["id"]
        steps = {
            "info": self.info, "chat": self.chat_exchanges, "completions": self.completions,
            "generate": self.generate, "tokenize": self.tokenize, "prefix_cache": self.prefix_cache,
            "flush": self.flush, "context": self.context, "structured": self.structured, "tools": self.tools,
            "reasoning": self.reasoning, "image": self.image, "errors": self.errors, "metrics": self.final_metrics,
        }
        if not only or "info" in only:
            self.save("models", models)
            self.facts["models"] = models["body"]["data"]
        for name, step in steps.items():
            if not only or name in only:
                print(f"== {name}")
                step()

    def info(self) -> None:
        for path in ("/get_model_info", "/model_info", "/get_server_info", "/server_info", "/get_load",
                     "/health", "/health_generate", "/ping", "/version", "/get_weight_version"):
            ex = self.call("GET", path)
            self.save("info" + path.replace("/", "_"), ex)
        si = self.call("GET", "/server_info")["body"]
        mi = self.call("GET", "/model_info")["body"]
        self.facts["server_info"] = {k: si.get(k) for k in ("model_path", "revision", "served_model_name", "version",
                                                            "device", "attention_backend", "context_length",
                                                            "max_total_num_tokens", "reasoning_parser",
                                                            "tool_call_parser", "enable_metrics",
                                                            "enable_cache_report")} if isinstance(si, dict) else si
        self.facts["model_info"] = mi

    def chat_exchanges(self) -> None:
        plain = self.call("POST", "/v1/chat/completions", self.chat(RAINBOW))
        self.save("chat", plain)
        s = self.stream("/v1/chat/completions", self.chat(RAINBOW, stream_options={"include_usage": True}))
        self.save("chat_stream_usage", s)
        bare = self.stream("/v1/chat/completions", self.chat(RAINBOW, max_tokens=8))
        self.save("chat_stream_no_usage", bare)
        chunks = self.chunks(s)
        self.facts["chat"] = {
            "message_keys": sorted(plain["body"]["choices"][0]["message"]),
            "usage": plain["body"].get("usage"),
            "stream_first_chunk": chunks[0] if chunks else None,
            "stream_role_chunk_first": bool(chunks and chunks[0]["choices"]
                                            and chunks[0]["choices"][0]["delta"].get("role") == "assistant"),
            "stream_last_chunk": chunks[-1] if chunks else None,
            "stream_usage_chunk_choices_empty": bool(chunks and chunks[-1].get("usage") and chunks[-1]["choices"] == []),
            "stream_ends_with_done": s["sse"][-1] == "data: [DONE]",
            "stream_without_include_usage_has_usage": any(c.get("usage") for c in self.chunks(bare)),
        }

    def completions(self) -> None:
        ids = [(7 * i + 1000) % 40000 + 100 for i in range(32)]  # a token-id prompt, as the benchmarks send
        measured = {"model": self.model, "prompt": ids, "stream_options": {"include_usage": True}, "temperature": 0,
                    "max_tokens": 16, "ignore_eos": True, "min_tokens": 16}  # tasks/load/plan.py completion_body
        s = self.stream("/v1/completions", measured)
        self.save("completions_stream", s)
        for echo in (False, True):
            ex = self.call("POST", "/v1/completions", {"model": self.model, "prompt": ECHO_PROMPT, "echo": echo,
                                                        "max_tokens": 16, "temperature": 0})
            self.save(f"completions_echo_{str(echo).lower()}", ex)
        lp = self.call("POST", "/v1/completions", {"model": self.model, "prompt": "The capital of France is",
                                                   "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0})
        self.save("completions_echo_logprobs", lp)
        chunks = self.chunks(s)
        self.facts["completions"] = {
            "stream_chunks": len(chunks), "stream_last_chunk": chunks[-1] if chunks else None,
            "exact_output_tokens": next((c["usage"]["completion_tokens"] for c in chunks if c.get("usage")), None),
            "echo_logprobs_status": lp["status"],
            "echo_logprobs": (lp["body"]["choices"][0].get("logprobs") if lp["status"] == 200 else lp["body"]),
        }

    def generate(self) -> None:
        body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True, "logprob_start_len": 0}  # the adapter's prompt_logprobs_body
        plain = self.call("POST", "/generate", body)
        self.save("generate_prompt_logprobs", plain)
        g = self.call("POST", "/generate", {"text": "The capital of France is",
                                            "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        self.save("generate", g)
        s = self.stream("/generate", {"text": "The capital of France is",
                                      "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
        self.save("generate_stream", s)
        mi = plain["body"].get("meta_info", {}) if isinstance(plain["body"], dict) else {}
        self.facts["generate"] = {
            "meta_info_keys": sorted((g["body"] or {}).get("meta_info", {})),
            "meta_info": g["body"].get("meta_info"),
            "input_token_logprobs": mi.get("input_token_logprobs"),
            "stream_chunks": len(self.chunks(s)),
            "stream_text_cumulative": [c.get("text") for c in self.chunks(s)],
        }

    def tokenize(self) -> None:
        out = {}
        for path, body in (("/tokenize", {"prompt": "The capital of France is"}),
                           ("/v1/tokenize", {"prompt": "The capital of France is"}),
                           ("/tokenize", {"text": "The capital of France is"}),
                           ("/tokenize", {"messages": [{"role": "user", "content": RAINBOW}]}),
                           ("/detokenize", {"tokens": [504, 3575, 282, 4649, 314]})):
            ex = self.call("POST", path, body)
            key = path.strip("/").replace("/", "_") + "_" + next(iter(body))
            self.save(key, ex)
            out[key] = {"status": ex["status"], "body": ex["body"]}
        self.facts["tokenize"] = out

    def prefix_cache(self) -> None:
        """The long prompt cold, hot, then cold again after a flush: cached_tokens, counters and gauge."""
        n = self.call("POST", "/tokenize", {"prompt": LONG_PROMPT})["body"]
        steps: list[dict[str, Any]] = []

        def scrape_now(label: str) -> dict[str, float]:
            m = scrape(self.metrics())
            keep = {k: m.get(k) for k in ("sglang:prompt_tokens_total", "sglang:cached_tokens_total",
                                           "sglang:cache_hit_rate", "sglang:num_requests_total",
                                           "sglang:token_usage")}
            steps.append({"step": f"GET /metrics {label}", **keep})
            return m

        def run(label: str) -> dict[str, Any]:
            s = self.stream("/v1/completions", {"model": self.model, "prompt": LONG_PROMPT, "max_tokens": 4,
                                                "temperature": 0, "stream_options": {"include_usage": True}})
            usage = next((c["usage"] for c in self.chunks(s) if c.get("usage")), None)
            steps.append({"step": f"POST /v1/completions stream ({label})", "status": s["status"],
                          "ttft_s": s["timing"]["first_output_s"], "usage": usage})
            return s

        flush = self.call("POST", "/flush_cache")
        steps.append({"step": "POST /flush_cache (idle)", "status": flush["status"], "body": flush["body"]})
        time.sleep(1)
        scrape_now("before")
        cold = run("cold")
        time.sleep(1)
        scrape_now("after cold")
        hot = run("hot")
        time.sleep(1)
        scrape_now("after hot")
        time.sleep(6)
        scrape_now("idle 6 s later")
        flush = self.call("POST", "/flush_cache")
        steps.append({"step": "POST /flush_cache (idle)", "status": flush["status"], "body": flush["body"]})
        time.sleep(1)
        scrape_now("after flush")
        again = run("cold again after flush")
        time.sleep(1)
        scrape_now("after cold again")
        self.save("prefix_cache", {"prompt": shorten(LONG_PROMPT), "prompt_tokens_by_tokenize": n.get("count"),
                                   "steps": steps})
        self.save("prefix_cache_cold_stream", cold)
        self.save("prefix_cache_hot_stream", hot)
        self.facts["prefix_cache"] = {"prompt_tokens": n.get("count"), "steps": steps,
                                      "again_status": again["status"]}

    def flush(self) -> None:
        out: dict[str, Any] = {}
        for method in ("GET", "POST"):
            ex = self.call(method, "/flush_cache")
            self.save(f"flush_cache_idle_{method.lower()}", ex)
            out[f"idle_{method}"] = {"status": ex["status"], "body": ex["body"]}

        # during a stream: the clear is sent when the first output has arrived
        during: dict[str, Any] = {}
        went = threading.Event()

        def clear_now() -> None:
            went.set()

        result: dict[str, Any] = {}
        t = threading.Thread(target=lambda: result.update(self.stream(
            "/v1/chat/completions", self.chat("Count from one to forty in words.", max_tokens=64,
                                              stream_options={"include_usage": True}), on_output=clear_now)))
        t.start()
        went.wait(120)
        during = self.call("POST", "/flush_cache")
        t.join()
        # right after [DONE], then every 0.1 s until it clears; three streams
        tries: list[dict[str, Any]] = []
        for attempt in range(3):
            if attempt:
                self.stream("/v1/chat/completions", self.chat(RAINBOW, max_tokens=8))
            ended = time.perf_counter()
            for _ in range(100):
                ex = self.call("POST", "/flush_cache")
                tries.append({"stream": attempt + 1, "t_s": round(time.perf_counter() - ended, 3),
                              "status": ex["status"], "body": ex["body"]})
                if ex["status"] == 200:
                    break
                time.sleep(0.1)
        self.save("flush_cache_during_stream", {"note": "POST /flush_cache sent once the stream's first output "
                                                        "arrived", "flush": during,
                                                "stream_status": result.get("status"),
                                                "stream_events": (result.get("timing") or {}).get("events")})
        self.save("flush_cache_after_stream", {"note": "POST /flush_cache right after the stream's data: [DONE], "
                                                       "then every 0.1 s until 200; three streams", "tries": tries})
        out["during_stream"] = {"status": during["status"], "body": during["body"]}
        out["after_stream"] = tries

        # ?timeout=S: the server waits for idle itself (python/sglang/srt/managers/scheduler_components/flush_wrapper.py)
        went.clear()
        result = {}
        t = threading.Thread(target=lambda: result.update(self.stream(
            "/v1/chat/completions", self.chat("Count from one to twenty in words.", max_tokens=24),
            on_output=clear_now)))
        t.start()
        went.wait(120)
        waited = self.call("POST", "/flush_cache?timeout=60")
        t.join()
        self.save("flush_cache_timeout_during_stream", {"note": "POST /flush_cache?timeout=60 sent once the stream's "
                                                                "first output arrived", "flush": waited,
                                                        "stream_last_event_s": (result.get("timing") or {}).get("last_event_s")})
        out["timeout_during_stream"] = {"status": waited["status"], "body": waited["body"],
                                        "elapsed_s": waited["elapsed_s"]}
        self.facts["flush_cache"] = out

    def context(self) -> None:
        info = self.call("GET", "/v1/models")["body"]["data"][0]
        limit = int(info.get("max_model_len") or 8192)
        over = "word " * (limit + 100)
        out = {}
        cases = (
            ("chat", "/v1/chat/completions", {"model": self.model, "messages": [{"role": "user", "content": over}],
                                              "max_tokens": 8}),
            ("completions", "/v1/completions", {"model": self.model, "prompt": over, "max_tokens": 8}),
            ("generate", "/generate", {"text": over, "sampling_params": {"max_new_tokens": 8}}),
        )
        # a prompt that fits, with max_tokens 50 past the context: refused before any prefill, or clamped?
        fits = "word " * (limit - 300)
        n = self.call("POST", "/tokenize", {"prompt": fits})["body"].get("count") or limit
        cases += (("completions_total", "/v1/completions", {"model": self.model, "prompt": fits,
                                                            "max_tokens": limit - n + 50}),)
        for name, path, body in cases:
            ex = self.call("POST", path, body)
            self.save(f"context_400_{name}", ex)
            out[name] = {"status": ex["status"], "body": ex["body"]}
        s = self.stream("/v1/chat/completions", cases[0][2])
        self.save("context_400_chat_stream", s)
        out["chat_stream"] = {"status": s["status"], "body": s.get("body"), "sse": s.get("sse")}
        self.facts["context"] = out

    def structured(self) -> None:
        schema = TOOLS[0]["function"]["parameters"]
        rf = {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}
        ex = self.call("POST", "/v1/chat/completions",
                       self.chat("Give the weather request for Paris as JSON.", response_format=rf, max_tokens=64))
        self.save("structured_json_schema", ex)
        s = self.stream("/v1/chat/completions",
                        self.chat("Give the weather request for Paris as JSON.", response_format=rf, max_tokens=64))
        self.save("structured_json_schema_stream", s)
        content = ex["body"]["choices"][0]["message"]["content"] if ex["status"] == 200 else None
        try:
            parsed = json.loads(content) if content else None
        except ValueError:
            parsed = "not JSON"
        self.facts["structured"] = {"status": ex["status"], "content": content, "parsed": parsed,
                                    "finish_reason": ex["body"]["choices"][0].get("finish_reason")
                                    if ex["status"] == 200 else None}

    def tools(self) -> None:
        out = {}
        forced = {"type": "function", "function": {"name": "get_weather"}}
        for name, choice in (("auto", "auto"), ("forced", forced), ("required", "required")):
            ex = self.call("POST", "/v1/chat/completions",
                           self.chat(WEATHER_PROMPT, tools=TOOLS, tool_choice=choice, max_tokens=64))
            self.save(f"tool_call_{name}", ex)
            s = self.stream("/v1/chat/completions",
                            self.chat(WEATHER_PROMPT, tools=TOOLS, tool_choice=choice, max_tokens=64))
            self.save(f"tool_call_{name}_stream", s)
            msg = ex["body"]["choices"][0]["message"] if ex["status"] == 200 else ex["body"]
            frags = [c["choices"][0]["delta"].get("tool_calls") for c in self.chunks(s)
                     if c.get("choices") and c["choices"][0].get("delta", {}).get("tool_calls")]
            out[name] = {"status": ex["status"], "message": msg,
                         "finish_reason": ex["body"]["choices"][0].get("finish_reason") if ex["status"] == 200 else None,
                         "stream_tool_fragments": frags,
                         "stream_content": "".join((c["choices"][0].get("delta") or {}).get("content") or ""
                                                   for c in self.chunks(s) if c.get("choices"))}
        # what the parser got for a forced call: the generated tokens, through logprobs (the non-streamed answer
        # drops an incomplete call)
        ex = self.call("POST", "/v1/chat/completions", self.chat(WEATHER_PROMPT, tools=TOOLS, tool_choice=forced,
                                                                 max_tokens=64, logprobs=True, top_logprobs=0))
        raw = None
        if ex["status"] == 200 and (ex["body"]["choices"][0].get("logprobs") or {}).get("content"):
            entries = ex["body"]["choices"][0]["logprobs"]["content"]
            raw = "".join(t["token"] for t in entries)
            ex["body"]["choices"][0]["logprobs"] = {"content": f"[{len(entries)} token entries, joined in "
                                                               "raw_text_from_logprobs]"}
        self.save("tool_call_forced_raw_text", {**ex, "raw_text_from_logprobs": raw, "note": (
            "tool_choice forced to get_weather, with logprobs: the tokens show the raw text the tool parser got. "
            "The structural tag holds the name and the format; arguments follow the tool's parameters schema only "
            "with \"strict\": true (python/sglang/srt/function_call/function_call_parser.py "
            "get_structure_constraint).")})
        out["forced_raw_text"] = raw
        self.facts["tools"] = out

    def reasoning(self) -> None:
        ex = self.call("POST", "/v1/chat/completions", self.chat(REASONING_PROMPT, max_tokens=64))
        self.save("reasoning_chat", ex)
        s = self.stream("/v1/chat/completions", self.chat(REASONING_PROMPT, max_tokens=64))
        self.save("reasoning_chat_stream", s)
        off = self.call("POST", "/v1/chat/completions", self.chat(REASONING_PROMPT, max_tokens=32,
                                                                  separate_reasoning=False))
        self.save("reasoning_chat_separate_false", off)
        no_think = self.call("POST", "/v1/chat/completions", self.chat(
            REASONING_PROMPT, max_tokens=32, chat_template_kwargs={"enable_thinking": False}))
        self.save("reasoning_chat_enable_thinking_false", no_think)
        fields = sorted({k for c in self.chunks(s) for ch in c.get("choices") or []
                         for k, v in (ch.get("delta") or {}).items() if v})
        msg = ex["body"]["choices"][0]["message"] if ex["status"] == 200 else ex["body"]
        self.facts["reasoning"] = {
            "status": ex["status"], "message": msg, "stream_delta_fields_with_values": fields,
            "stream_reasoning": "".join((ch.get("delta") or {}).get("reasoning_content") or ""
                                        for c in self.chunks(s) for ch in c.get("choices") or []),
            "separate_reasoning_false": off["body"]["choices"][0]["message"] if off["status"] == 200 else off["body"],
            "enable_thinking_false": (no_think["body"]["choices"][0]["message"] if no_think["status"] == 200
                                      else no_think["body"])}

    def image(self) -> None:
        content = [{"type": "text", "text": "What is the main colour of this image? Answer in one word."},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_red_64x32()}}]
        ex = self.call("POST", "/v1/chat/completions", self.chat(content, max_tokens=16))
        self.save("image_input", ex)
        self.facts["image"] = {"status": ex["status"], "body": ex["body"]}

    def errors(self) -> None:
        ex = self.call("POST", "/v1/chat/completions", {**self.chat(RAINBOW, max_tokens=4), "model": "no-such-model"})
        self.save("error_unknown_model", ex)
        bad = self.call("POST", "/v1/chat/completions", {"model": self.model, "messages": "not a list"})
        self.save("error_bad_request", bad)
        self.facts["errors"] = {"unknown_model": {"status": ex["status"], "body": ex["body"]},
                                "bad_request": {"status": bad["status"], "body": bad["body"]}}

    def final_metrics(self) -> None:
        text = self.metrics()
        self.save_text("metrics", text)
        families = {}
        for line in text.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                families[m[1]] = m[2]
        samples = scrape(text)
        self.facts["metrics"] = {
            "families": len(families),
            "dayone_names": {name: {"expected": kind, "exposed_as": families.get(name),
                                    "value": samples.get(name, samples.get(name + "_count"))}
                             for name, kind in DAYONE_METRICS.items()},
            "sglang_families": families,
            "cached_tokens_total_labels": sorted({m[1] for m in re.finditer(
                r"^sglang:cached_tokens_total\{([^}]*)\}", text, re.MULTILINE)}),
        }

    def startup(self, log_text: str) -> None:
        """The startup lines worth keeping, up to the server's "ready to roll" (its own warm-up request done)."""
        ready = log_text.find("The server is fired up and ready to roll!")
        if ready >= 0:
            log_text = log_text[: log_text.find("\n", ready) + 1 or len(log_text)]
        kept = [line for line in log_text.splitlines()
                if STARTUP_KEEP.search(line) and not line.lstrip().startswith("warnings.warn")]
        self.save_text("startup_log", "\n".join(kept) + "\n")
        found = {}
        for key, rx in (("TOKEN_POOL", TOKEN_POOL), ("KV_ALLOCATED", KV_ALLOCATED), ("WEIGHTS", WEIGHTS)):
            m = rx.search(log_text)
            found[key] = self.scrub(m.group(0)) if m else None
        self.facts["startup_regexes"] = found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--startup-log", type=Path, help="the server's log, read for startup_log.txt")
    ap.add_argument("--model-dir", help="the model directory the server was started on (scrubbed to "
                                        f"{MODEL_PLACEHOLDER}); default: /model_info's model_path")
    ap.add_argument("--watch-startup", action="store_true", help="record /health, /ping, /v1/models while starting")
    ap.add_argument("--only", default="", help="comma-separated steps (startup alone: only --startup-log; info, chat, completions, generate, tokenize, "
                                               "prefix_cache, flush, context, structured, tools, reasoning, image, "
                                               "errors, metrics)")
    ap.add_argument("--tag", default="", help="a suffix for the file names (e.g. the other reasoning parser)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.base_url, args.out, args.model_dir, args.tag)
    if args.watch_startup:
        rec.add_scrubs()
        rec.watch_startup()
    if not rec.model_dir:
        try:
            rec.model_dir = rec.client.get(rec.base + "/model_info").json().get("model_path")
        except (httpx.HTTPError, ValueError):
            pass
    rec.scrubs = []
    only = {s for s in args.only.split(",") if s}
    if only == {"startup"}:  # the startup log alone: no server needed
        rec.add_scrubs()
    else:
        rec.record(only)
    if args.startup_log:
        rec.startup(args.startup_log.read_text(errors="replace"))
    facts_path = args.out / (f"facts.{args.tag}.json" if args.tag else "facts.json")
    facts = json.loads(facts_path.read_text()) if facts_path.exists() and only else {}
    facts.update(rec.facts)
    facts_path.write_text(rec.scrub(json.dumps(facts, indent=1, ensure_ascii=False)) + "\n")
    print(f"  wrote {facts_path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
