"""A real OCI registry (Debian's docker-registry, distribution 2.8) on loopback, behind token auth.

The registry runs with `auth: token:` and trusts a self-signed certificate; the token endpoint
here is a small HTTP server that signs JWTs with that certificate's key (x5c header), the way
Docker Hub's auth service does. Anonymous clients get pull tokens for public repositories;
`pusher` gets pull and push everywhere; repositories under `private/` need credentials.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tasks.core.ports import free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
SERVICE = "dayone-test-registry"
ISSUER = "dayone-test-issuer"
USERS = {"pusher": "s3cret"}


def _ensure_registry_binary() -> str:
    if os.path.exists(REGISTRY_BIN):
        return REGISTRY_BIN
    if os.geteuid() != 0:
        pytest.fail(f"{REGISTRY_BIN} is missing. Fix: apt-get update && apt-get install -y docker-registry")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "docker-registry"], check=True, env=env, capture_output=True)
    if not os.path.exists(REGISTRY_BIN):
        pytest.fail(f"installing docker-registry did not provide {REGISTRY_BIN}")
    return REGISTRY_BIN


class TokenIssuer:
    """Signs registry tokens; the policy mirrors a public registry with one private namespace."""

    def __init__(self, workdir: Path):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.bundle = workdir / "token-root.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.requests: list[dict] = []  # what the clients asked for, for the tests to check

    def grant(self, user: str | None, scope: str | None) -> list[dict]:
        if not scope:
            return []
        kind, name, actions = scope.split(":", 2)
        wanted = actions.split(",")
        if user:
            allowed = wanted
        else:
            allowed = [] if name.startswith("private/") else [a for a in wanted if a == "pull"]
        return [{"type": kind, "name": name, "actions": allowed}]

    def token(self, user: str | None, scope: str | None) -> str:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "sub": user or "",
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": self.grant(user, scope),
        }
        der = self.cert.public_bytes(serialization.Encoding.DER)
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"x5c": [base64.b64encode(der).decode()]})


def _serve(handler_cls: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def _token_handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)
            scope = query.get("scope", [None])[0]
            user = None
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                if USERS.get(name) != password:
                    issuer.requests.append({"user": name, "scope": scope, "granted": False})
                    self.send_response(401)
                    self.end_headers()
                    return
                user = name
            issuer.requests.append({"user": user, "scope": scope, "granted": True})
            body = json.dumps({"token": issuer.token(user, scope), "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class Registry:
    """A running registry and the push side of its API (what `docker push` does)."""

    def __init__(self, host: str, token_url: str):
        self.host = host
        self.token_url = token_url
        self.http = httpx.Client(base_url=f"http://{host}", timeout=30)

    def _push_token(self, repository: str) -> dict[str, str]:
        r = httpx.get(
            self.token_url,
            params={"service": SERVICE, "scope": f"repository:{repository}:pull,push"},
            auth=("pusher", USERS["pusher"]),
        )
        r.raise_for_status()
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def push_blob(self, repository: str, data: bytes) -> dict:
        auth = self._push_token(repository)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        r = self.http.post(f"/v2/{repository}/blobs/uploads/", headers=auth)
        assert r.status_code == 202, r.text
        location = r.headers["location"]
        sep = "&" if "?" in location else "?"
        r = self.http.put(
            f"{location}{sep}digest={digest}",
            content=data,
            headers={**auth, "Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 201, r.text
        return {"digest": digest, "size": len(data)}

    def push_manifest(self, repository: str, reference: str, doc: dict, media_type: str) -> dict:
        raw = json.dumps(doc, indent=3).encode()  # registries keep the exact bytes: hash these
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        r = self.http.put(
            f"/v2/{repository}/manifests/{reference}",
            content=raw,
            headers={**self._push_token(repository), "Content-Type": media_type},
        )
        assert r.status_code == 201, r.text
        assert r.headers["docker-content-digest"] == digest
        return {"mediaType": media_type, "digest": digest, "size": len(raw)}

    def push_image(self, repository: str, arch: str, docker_types: bool = False, salt: str = "") -> dict:
        """One platform manifest (config + one layer), pushed by digest; returns its descriptor."""
        layer = self.push_blob(repository, f"layer {arch} {salt} {uuid.uuid4()}".encode())
        config = self.push_blob(
            repository,
            json.dumps({"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}).encode(),
        )
        if docker_types:
            mt = "application/vnd.docker.distribution.manifest.v2+json"
            cfg_mt, layer_mt = "application/vnd.docker.container.image.v1+json", "application/vnd.docker.image.rootfs.diff.tar.gzip"
        else:
            mt = "application/vnd.oci.image.manifest.v1+json"
            cfg_mt, layer_mt = "application/vnd.oci.image.config.v1+json", "application/vnd.oci.image.layer.v1.tar+gzip"
        doc = {
            "schemaVersion": 2,
            "mediaType": mt,
            "config": {"mediaType": cfg_mt, **config},
            "layers": [{"mediaType": layer_mt, **layer}],
        }
        return self.push_manifest(repository, "sha256:" + hashlib.sha256(json.dumps(doc, indent=3).encode()).hexdigest(), doc, mt)

    def push_attestation(self, repository: str, subject: dict) -> dict:
        statement = self.push_blob(repository, json.dumps({"_type": "https://in-toto.io/Statement/v0.1", "subject": subject["digest"]}).encode())
        config = self.push_blob(repository, b"{}")
        doc = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": [{"mediaType": "application/vnd.in-toto+json", **statement}],
        }
        raw_digest = "sha256:" + hashlib.sha256(json.dumps(doc, indent=3).encode()).hexdigest()
        desc = self.push_manifest(repository, raw_digest, doc, doc["mediaType"])
        return {
            **desc,
            "platform": {"os": "unknown", "architecture": "unknown"},
            "annotations": {"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": subject["digest"]},
        }

    def push_multiarch(self, repository: str, tag: str, docker_types: bool = False, salt: str = "") -> dict:
        """arm64 and amd64 manifests plus an attestation, listed first like BuildKit lists them."""
        arm = self.push_image(repository, "arm64", docker_types, salt)
        amd = self.push_image(repository, "amd64", docker_types, salt)
        entries = [
            {**arm, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {**amd, "platform": {"os": "linux", "architecture": "amd64"}},
        ]
        if docker_types:
            mt = "application/vnd.docker.distribution.manifest.list.v2+json"
        else:
            mt = "application/vnd.oci.image.index.v1+json"
            entries.insert(0, self.push_attestation(repository, amd))
        index = self.push_manifest(repository, tag, {"schemaVersion": 2, "mediaType": mt, "manifests": entries}, mt)
        return {"index": index["digest"], "amd64": amd["digest"], "arm64": arm["digest"]}


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory):
    binary = _ensure_registry_binary()
    workdir = tmp_path_factory.mktemp("registry")
    issuer = TokenIssuer(workdir)
    token_server, token_host = _serve(_token_handler(issuer))
    port = free_port()
    config = workdir / "config.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}, "delete": {"enabled": True}},
                "http": {"addr": f"127.0.0.1:{port}"},
                "auth": {
                    "token": {
                        "realm": f"http://{token_host}/token",
                        "service": SERVICE,
                        "issuer": ISSUER,
                        "rootcertbundle": str(issuer.bundle),
                    }
                },
            }
        )
    )
    log = open(workdir / "registry.log", "wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    host = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"http://{host}/v2/", timeout=1).status_code in (200, 401):
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("docker-registry did not start: " + (workdir / "registry.log").read_text()[-2000:])
        time.sleep(0.05)
    reg = Registry(host, f"http://{token_host}/token")
    reg.issuer = issuer
    try:
        yield reg
    finally:
        proc.terminate()
        proc.wait(10)
        token_server.shutdown()
        log.close()
        shutil.rmtree(workdir / "data", ignore_errors=True)


@pytest.fixture()
def digestless_proxy(registry: Registry):
    """A reverse proxy to the registry that drops Docker-Content-Digest and the manifest media type."""
    upstream = httpx.Client(base_url=f"http://{registry.host}", timeout=30)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _proxy(self) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")}
            r = upstream.request(self.command, self.path, headers=headers)
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() == "content-type" and "/manifests/" in self.path:
                    v = "application/octet-stream"  # and no media type either
                if k.lower() not in ("docker-content-digest", "transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            body = b"" if self.command == "HEAD" else r.content
            self.send_header("Content-Length", str(len(body) if self.command != "HEAD" else r.headers.get("content-length", 0)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_HEAD = _proxy

    server, host = _serve(Handler)
    yield host
    server.shutdown()
    upstream.close()
