"""The run config: one validated model that every entry point builds (trigger form, CLI, nightly, backfill).

Bad input fails in one place, before anything is deployed, with one kind of message (tasks/config/parse.py).
A section's model lives in the module of its domain: import it from there.
"""

from tasks.config.base import ConfigError
from tasks.config.parse import parse_run_config, read_config_file
from tasks.config.run import RunConfig

__all__ = ["ConfigError", "RunConfig", "parse_run_config", "read_config_file"]
