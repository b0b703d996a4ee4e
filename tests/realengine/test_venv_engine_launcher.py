"""The vllm and sglang launchers of the local target, without starting an engine: the command line is the adapter's,
the CPU settings the config's, and what is missing on this machine is named with its fix."""

from __future__ import annotations

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.targets.local import LocalTarget, launcher_for
from tasks.targets.venv_engine import VenvEngineMissing
from venv_engine_helpers import venv_config


@pytest.mark.parametrize("dialect,module,model_flag", [
    ("vllm", "vllm.entrypoints.openai.api_server", "--model"),
    ("sglang", "sglang.launch_server", "--model-path"),
])
def test_the_command_is_the_adapters_with_the_configs_cpu_settings(dialect, module, model_flag):
    config = venv_config(dialect)
    engine = config.engines[0]
    spec = launcher_for(engine.launcher).command(config, engine, 4321, "127.0.0.1")
    assert spec.argv[0].endswith("/bin/python") and spec.argv[1:3] == ["-m", module]
    assert spec.argv[spec.argv.index(model_flag) + 1].endswith("SmolLM2-135M-Instruct-bf16")
    assert spec.argv[spec.argv.index("--port") + 1] == "4321"
    assert spec.argv[-len(engine.args):] == engine.args  # --enforce-eager, --device cpu ...: the config's
    assert engine.env.items() <= spec.env.items()


@pytest.mark.parametrize("dialect,variable", [("vllm", "DAYONE_VLLM_VENV"), ("sglang", "DAYONE_SGLANG_VENV")])
def test_a_missing_environment_names_the_field_and_the_make_target(dialect, variable, tmp_path, monkeypatch):
    monkeypatch.setenv(variable, str(tmp_path / "none"))
    config = venv_config(dialect)
    with pytest.raises(VenvEngineMissing, match=rf"engines\[0\]\.launcher: .* Fix: run make {dialect}-venv"):
        LocalTarget().pin(config, config.engines[0])


def test_a_missing_model_directory_names_model_path_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_SMOLLM2_HF", str(tmp_path / "no-model"))
    config = venv_config("vllm")
    with pytest.raises(VenvEngineMissing, match=r"model\.path: .* Fix: run make vllm-venv"):
        LocalTarget().pin(config, config.engines[0])


def test_a_launcher_of_another_dialect_is_refused_at_parse():
    with pytest.raises(ConfigError, match=r"launcher: 'vllm' starts the engine of that name, and dialect is 'sglang'"):
        parse_run_config({"engines": [{"name": "e", "dialect": "sglang", "launcher": "vllm"}],
                          "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}}})


@pytest.mark.parametrize("preset", ["vllm-sglang", "vllm-compile", "vllm-ngram"])
def test_the_real_engine_presets_parse_and_interleave(preset):
    import yaml

    from tasks.config.presets import PRESET_DIR
    from tasks.steps.lanes import design

    config = parse_run_config(yaml.safe_load((PRESET_DIR / f"{preset}.yaml").read_text(encoding="utf-8")))
    assert {e.launcher for e in config.engines} <= {"vllm", "sglang"} and design(config) == "interleaved"
    if preset == "vllm-ngram":
        from tasks.quality.speculative import off_on_pairs

        assert off_on_pairs(config) == [("vllm", "vllm-ngram")]
