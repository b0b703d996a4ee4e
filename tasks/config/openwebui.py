"""The OpenWebUI DayOne runs: the version its local environment installs, the image of that version, and the
settings a local process and a pod share."""

OPENWEBUI_VERSION = "0.12.4"
# Where OpenWebUI publishes its image; the same version as the local environment, so both run one client.
DEFAULT_IMAGE = f"ghcr.io/open-webui/open-webui:v{OPENWEBUI_VERSION}"
ADMIN = {"name": "DayOne", "email": "admin@dayone.invalid"}  # the first account is the admin


def offline_settings(engine_v1_url: str) -> dict[str, str]:
    """OpenWebUI's settings (open_webui/env.py, config.py) for a machine that reaches only the engine: the
    part a local process and a pod share (their paths, keys and file layout are their own)."""
    return {
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "RAG_EMBEDDING_ENGINE": "openai",  # not the local sentence-transformers model, never loaded
        "BYPASS_EMBEDDING_AND_RETRIEVAL": "true",
        "ENABLE_WEB_SEARCH": "false",
        "ENABLE_TITLE_GENERATION": "false",
        "ENABLE_TAGS_GENERATION": "false",
        "ENABLE_FOLLOW_UP_GENERATION": "false",
        "ENABLE_AUTOCOMPLETE_GENERATION": "false",
        "ENABLE_OLLAMA_API": "false",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ANONYMIZED_TELEMETRY": "false",
        "OPENAI_API_BASE_URLS": engine_v1_url,
    }


def tls_settings(ca_bundle: str | None, verify: bool) -> dict[str, str]:
    """OpenWebUI's trust of the engine's certificate, as every DayOne path to the engine has it (the engine's
    tls_ca_bundle and tls_verify): AIOHTTP_CLIENT_SESSION_SSL (open_webui/env.py), which its model list and
    chat requests to the engine use; a CA bundle path, or False for no check."""
    if not verify:
        return {"AIOHTTP_CLIENT_SESSION_SSL": "False"}
    return {"AIOHTTP_CLIENT_SESSION_SSL": ca_bundle} if ca_bundle else {}


def serve_argv(python: str, host: str, port: int) -> list[str]:
    """OpenWebUI's server, as `open-webui serve` and the image's start.sh run it."""
    return [python, "-m", "uvicorn", "open_webui.main:app", "--host", host, "--port", str(port)]
