"""Pinning reads the image's own word on its version (org.opencontainers.image.version), for its maturity:
a plain OCI distribution server written for the test (no auth), serving an index, its amd64 manifest and
their image configs, one labelled a preview build and one unlabelled single-platform image."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.config.maturity import VERSION_LABEL, spec_maturity
from tasks.config.engines import EngineSpec
from tasks.k8s.images import OCI_INDEX, OCI_MANIFEST, resolve


def _blob(doc: dict) -> tuple[str, bytes]:
    raw = json.dumps(doc).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest(), raw


class Registry:
    """repository -> {reference: (media type, bytes)} for manifests, and digest -> bytes for blobs."""

    def __init__(self) -> None:
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.blobs: dict[str, bytes] = {}

    def image(self, labels: dict[str, str] | None) -> str:
        """An amd64 image manifest whose config carries `labels`; its digest."""
        config_digest, config = _blob({"architecture": "amd64", "os": "linux",
                                       "config": {"Labels": labels} if labels else {}})
        self.blobs[config_digest] = config
        digest, raw = _blob({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
                             "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                        "digest": config_digest, "size": len(config)}})
        self.manifests[digest] = (OCI_MANIFEST, raw)
        return digest

    def tag(self, tag: str, media_type: str, raw: bytes) -> None:
        self.manifests[tag] = self.manifests["sha256:" + hashlib.sha256(raw).hexdigest()] = (media_type, raw)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, body: bool) -> None:
                parts = self.path.split("/")
                found = None
                if "manifests" in parts:
                    found = registry.manifests.get(parts[-1])
                elif "blobs" in parts and parts[-1] in registry.blobs:
                    found = ("application/octet-stream", registry.blobs[parts[-1]])
                if found is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                media_type, raw = found
                self.send_response(200)
                self.send_header("Content-Type", media_type)
                self.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(raw).hexdigest())
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if body:
                    self.wfile.write(raw)

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(False)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(True)

        return Handler


@pytest.fixture
def registry():
    reg = Registry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), reg.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield reg, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_index_pin_reads_the_platform_images_version_label_and_its_maturity(registry):
    reg, host = registry
    amd64 = reg.image({VERSION_LABEL: "0.11.1rc2.dev47+g1a2b3c"})
    _, index = _blob({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": amd64, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}}]})
    reg.tag("glm53", OCI_INDEX, index)
    pinned = resolve(f"{host}/vllm/vllm-openai:glm53")
    assert pinned.platform_digest == amd64 and pinned.version_label == "0.11.1rc2.dev47+g1a2b3c"
    # the tag says nothing; the label says a release candidate: a preview
    spec = EngineSpec(name="vllm", dialect="vllm", image=f"{host}/vllm/vllm-openai:glm53")
    found = spec_maturity(spec, pinned.as_dict())
    assert found["maturity"] == "preview" and found["source"].startswith("read from its image label")


def test_an_unlabelled_single_image_pins_with_no_version_and_no_maturity(registry):
    reg, host = registry
    digest = reg.image(None)
    reg.tag("latest", OCI_MANIFEST, reg.manifests[digest][1])
    pinned = resolve(f"{host}/lmsysorg/sglang:latest")
    assert pinned.platform_digest == digest and pinned.version_label is None
    spec = EngineSpec(name="sglang", dialect="sglang", image=f"{host}/lmsysorg/sglang:latest")
    assert spec_maturity(spec, pinned.as_dict())["maturity"] is None
