"""The measuring scenarios (PROTOCOL.md section 4): load sweeps, capacity, warmup, the trace, sessions,
shared prefixes and datasets. Their names are in tasks/core/names.py."""
