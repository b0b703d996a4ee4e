"""The functional checks' names, in the order they run: what `scenarios.functional.skip` may name.

Names only, so the run config checks skip names when it is parsed (tasks/config/scenarios.py);
the checks themselves are listed in tasks/checks/__init__.py, which refuses a list that differs.
"""

CHECK_NAMES: tuple[str, ...] = (
    "model_list",
    "chat",
    "chat_streaming",
    "reasoning_split",
    "tool_call",
    "tool_call_streaming",
    "image_input",
    "completions_echo_false",
    "completions_echo_true",
    "streaming_usage",
    "output_streams",
    "openai_sdk",
)
