"""The pipeline's steps: a step protocol (protocol.py), one ordered registry and the plan (registry.py),
one way to run a step and record how it ended (execution.py), the steps' bodies (run_steps.py,
engine_steps.py) and `dayone step` (cli.py). The step order is stated in docs/ARCHITECTURE.md."""
