"""DayOne's engine simulator: an OpenAI-compatible server in SGLang's, vLLM's or a generic
dialect, with exact ground truth at /sim/requests. Started as a subprocess by tasks/sim/process.py
(tests, benchmarks) or by the `sim` launcher of a run (tasks/targets).
"""
