"""Image pinning against a real registry (distribution 2.8) with the bearer-token flow."""

from __future__ import annotations

import json
import socket

import pytest

from tasks import cli
from tasks.k8s.images import (
    AuthRefused,
    ImageNotFound,
    RegistryError,
    RegistryUnreachable,
    TagNotFound,
    parse_image,
    resolve,
)


def test_tag_pins_the_index_and_its_amd64_manifest_skipping_the_attestation(registry):
    pushed = registry.push_multiarch("lmsysorg/sglang", "v0.5.0")
    pinned = resolve(f"{registry.host}/lmsysorg/sglang:v0.5.0")
    assert pinned.index_digest == pushed["index"]
    assert pinned.platform_digest == pushed["amd64"]
    assert pinned.pinned_ref == f"{registry.host}/lmsysorg/sglang@{pushed['amd64']}"
    assert pinned.tag == "v0.5.0"
    assert pinned.media_type == "application/vnd.oci.image.index.v1+json"
    # anonymous pull went through the token endpoint, scoped to this repository
    assert {"user": None, "scope": "repository:lmsysorg/sglang:pull", "granted": True} in registry.issuer.requests


def test_moving_the_tag_moves_the_pin_and_old_digests_still_resolve(registry):
    first = registry.push_multiarch("vllm/vllm-openai", "nightly", salt="one")
    before = resolve(f"{registry.host}/vllm/vllm-openai:nightly")
    second = registry.push_multiarch("vllm/vllm-openai", "nightly", docker_types=True, salt="two")
    after = resolve(f"{registry.host}/vllm/vllm-openai:nightly")
    assert (before.index_digest, before.platform_digest) == (first["index"], first["amd64"])
    assert (after.index_digest, after.platform_digest) == (second["index"], second["amd64"])
    assert after.media_type == "application/vnd.docker.distribution.manifest.list.v2+json"
    assert after.platform_digest != before.platform_digest
    # a backfill pins by the recorded index digest and gets the old platform manifest back
    again = resolve(f"{registry.host}/vllm/vllm-openai@{first['index']}")
    assert again.platform_digest == first["amd64"]


def test_a_platform_manifest_digest_pins_to_itself(registry):
    amd = registry.push_image("single/amd", "amd64")
    registry.push_manifest("single/amd", "latest", *_manifest_doc(registry, "single/amd", amd))
    pinned = resolve(f"{registry.host}/single/amd@{amd['digest']}")
    assert pinned.index_digest is None
    assert pinned.platform_digest == amd["digest"]


def _manifest_doc(registry, repository, desc):
    r = registry.http.get(
        f"/v2/{repository}/manifests/{desc['digest']}",
        headers={**registry._push_token(repository), "Accept": desc["mediaType"]},
    )
    return json.loads(r.content), desc["mediaType"]


def test_a_single_arm64_image_is_refused(registry):
    arm = registry.push_image("single/arm", "arm64")
    registry.push_manifest("single/arm", "v1", *_manifest_doc(registry, "single/arm", arm))
    with pytest.raises(RegistryError, match="single linux/arm64 image, not linux/amd64"):
        resolve(f"{registry.host}/single/arm:v1")


def test_missing_digest_header_falls_back_to_hashing_the_manifest(registry, digestless_proxy):
    pushed = registry.push_multiarch("mirror/engine", "v2")
    pinned = resolve(f"{digestless_proxy}/mirror/engine:v2")
    assert pinned.index_digest == pushed["index"]
    assert pinned.platform_digest == pushed["amd64"]
    # a single-platform manifest through the same mirror is hashed as well
    amd = registry.push_image("mirror/single", "amd64")
    registry.push_manifest("mirror/single", "v1", *_manifest_doc(registry, "mirror/single", amd))
    single = resolve(f"{digestless_proxy}/mirror/single:v1")
    assert (single.index_digest, single.platform_digest) == (None, amd["digest"])


def test_unknown_image_is_named(registry):
    with pytest.raises(ImageNotFound, match="does not exist"):
        resolve(f"{registry.host}/nobody/nothing:v1")


def test_unknown_tag_lists_the_tags_there_are(registry):
    registry.push_multiarch("tagged/engine", "v1")
    with pytest.raises(TagNotFound, match=r"no tag 'v9' \(tags: v1\)"):
        resolve(f"{registry.host}/tagged/engine:v9")


def test_private_repository_needs_credentials(registry):
    pushed = registry.push_multiarch("private/engine", "v1")
    with pytest.raises(AuthRefused, match="anonymously"):
        resolve(f"{registry.host}/private/engine:v1")
    with pytest.raises(AuthRefused, match="token endpoint refused"):
        resolve(f"{registry.host}/private/engine:v1", credentials=("pusher", "wrong"))
    pinned = resolve(f"{registry.host}/private/engine:v1", credentials=("pusher", "s3cret"))
    assert pinned.platform_digest == pushed["amd64"]


def test_unreachable_registry_is_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(RegistryUnreachable, match=f"127.0.0.1:{port} is unreachable"):
        resolve(f"127.0.0.1:{port}/some/image:v1", timeout_s=2)


def test_cli_prints_the_pin_as_json(registry, capsys):
    pushed = registry.push_multiarch("cli/engine", "v1")
    assert cli.main(["pin", f"{registry.host}/cli/engine:v1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["platform_digest"] == pushed["amd64"] and doc["index_digest"] == pushed["index"]
    assert cli.main(["pin", f"{registry.host}/cli/engine:v7"]) == 1
    assert "no tag 'v7'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "image, expected",
    [
        ("ubuntu", ("registry-1.docker.io", "library/ubuntu", "latest", None)),
        ("lmsysorg/sglang:v0.5.0", ("registry-1.docker.io", "lmsysorg/sglang", "v0.5.0", None)),
        ("docker.io/vllm/vllm-openai:v0.11", ("registry-1.docker.io", "vllm/vllm-openai", "v0.11", None)),
        ("localhost:5000/a/b@sha256:" + "a" * 64, ("localhost:5000", "a/b", None, "sha256:" + "a" * 64)),
        ("ghcr.io/org/img:1.2", ("ghcr.io", "org/img", "1.2", None)),
    ],
)
def test_references_parse_with_docker_defaults(image, expected):
    ref = parse_image(image)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected
