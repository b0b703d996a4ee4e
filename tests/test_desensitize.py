"""One desensitizer for everything we publish."""

from tasks.core.desensitize import REDACTED, desensitize


def test_secrets_hosts_and_ips_are_removed_but_figures_stay():
    doc = {
        "password": "hunter2-planted",
        "prompt_tokens": 4400,
        "engine_env": {"HF_TOKEN": "hf_plantedplantedplantedplanted"},
        "log": "connect http://admin:s3cr3t@10.1.2.3:8000 host vllm.ml.svc.cluster.local token=abcd1234",
        "auth": "Bearer plantedbearertoken123",
        "image": "lmsysorg/sglang:v0.5.0",
    }
    out = desensitize(doc, extra_secrets=("s3cr3t",))
    text = str(out)
    for planted in ("hunter2-planted", "hf_planted", "s3cr3t", "10.1.2.3", "svc.cluster.local", "abcd1234",
                    "plantedbearertoken123"):
        assert planted not in text, planted
    assert out["prompt_tokens"] == 4400
    assert out["image"] == "lmsysorg/sglang:v0.5.0"


def test_times_of_day_are_not_mistaken_for_ipv6_but_ipv6_goes():
    out = desensitize("[2026-11-30 07:46:24] listening on [fe80::1%eth0] and 2001:db8:0:0:0:0:2:1")
    assert "07:46:24" in out
    assert "fe80::1" not in out and "2001:db8" not in out


def test_step_results_carry_no_key_a_masker_takes_for_a_secret():
    """A count under the key `pass` was logged as '<redacted>'; step results name their counts otherwise."""
    from tasks.steps.engine_steps import check_counts

    counts = check_counts(["pass", "pass", "fail", "not_applicable"])
    assert counts == {"checks_passed": 2, "checks_failed": 1, "checks_not_applicable": 1}
    assert desensitize(counts) == counts
    assert desensitize({"pass": 2}) == {"pass": REDACTED}  # why the key changed


def test_env_values_are_kept_but_secret_named_ones_are_withheld():
    """One rule: a word of the name (TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, AUTH, LICENSE ...) makes
    a variable a credential; settings stay, so the start can be repeated."""
    from tasks.core.desensitize import recorded_env, secret_name

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY",
                 "DB_PASSWORD", "GOOGLE_APPLICATION_CREDENTIALS", "PROXY_AUTH", "ENGINE_LICENSE", "KEY", "token"):
        assert secret_name(name), name
    for name in ("VLLM_USE_DEEP_GEMM", "TOKENIZERS_PARALLELISM", "VLLM_ATTENTION_BACKEND", "CUDA_VISIBLE_DEVICES",
                 "SGLANG_ENABLE_JIT_DEEPGEMM", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "HOME"):
        assert not secret_name(name), name
    env = {"VLLM_USE_DEEP_GEMM": "1", "HF_TOKEN": "hf_plantedplantedplanted01", "NCCL_SOCKET_IFNAME": "eth0",
           "PROXY": "http://10.1.2.3:3128"}
    assert recorded_env(env) == {"HF_TOKEN": REDACTED, "NCCL_SOCKET_IFNAME": "eth0", "PROXY": "http://<ip>",
                                 "VLLM_USE_DEEP_GEMM": "1"}
