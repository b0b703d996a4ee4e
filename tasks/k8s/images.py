"""Image pinning: resolve an image tag to digests through the OCI distribution API.

A run deploys by digest, never by tag: upstream may move a tag between two runs (or between
two engines of one run). `resolve` records both the multi-arch index digest and the digest of
the linux/amd64 manifest inside it; the pod is started with `repository@platform_digest`.

`dayone pin IMAGE[:TAG|@DIGEST]` prints the result as JSON.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from tasks.config.maturity import VERSION_LABEL

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)

DOCKER_HUB = "registry-1.docker.io"
DEFAULT_PLATFORM = "linux/amd64"
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")

_REF_RE = re.compile(
    r"^(?P<name>[a-zA-Z0-9.:/_-]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)


class RegistryError(RuntimeError):
    """Pinning failed; the message names the image and what to do."""


class ImageNotFound(RegistryError):
    pass


class TagNotFound(RegistryError):
    pass


class AuthRefused(RegistryError):
    pass


class RegistryUnreachable(RegistryError):
    pass


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port]
    repository: str  # path inside the registry, e.g. library/ubuntu
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when given, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"


def parse_image(image: str) -> ImageRef:
    """Split `[REGISTRY/]NAME[:TAG][@DIGEST]`, with Docker Hub's defaults for short names."""
    m = _REF_RE.match(image.strip())
    if not m:
        raise RegistryError(f"{image!r} is not an image reference. Fix: use NAME[:TAG] or REGISTRY/NAME[:TAG][@sha256:<64 hex>]")
    name, tag, digest = m.group("name"), m.group("tag"), m.group("digest")
    first, _, rest = name.partition("/")
    # The first component is a registry host when it looks like one (docker's rule).
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
        if "/" not in repository:
            repository = "library/" + repository
    if registry in ("docker.io", "index.docker.io"):
        registry = DOCKER_HUB
    if repository != repository.lower():
        raise RegistryError(f"{image!r}: repository names are lowercase. Fix: write {repository.lower()!r}")
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry, repository, tag, digest)


@dataclass(frozen=True)
class PinnedImage:
    image: str  # as the user wrote it
    registry: str
    repository: str
    tag: str | None
    index_digest: str | None  # the multi-arch index (manifest list), when the reference is one
    platform_digest: str  # the linux/amd64 image manifest: what the pod runs
    platform: str
    media_type: str  # of the manifest behind the tag
    pinned_ref: str  # repository@platform_digest, as a pod's image field takes it
    # The image's org.opencontainers.image.version (its config's label, else the manifest's annotation):
    # what the image says its version is, read for its maturity (tasks/config/maturity.py); None: not said.
    version_label: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


class RegistryClient:
    """The distribution API's read side for one registry, with its auth dance.

    `credentials` (username, password) are sent as basic auth to the token endpoint (bearer
    challenge) or to the registry itself (basic challenge); without them the anonymous token flow
    is used, as for public images.
    """

    def __init__(
        self,
        registry: str,
        credentials: tuple[str, str] | None = None,
        plain_http: bool | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ):
        if plain_http is None:
            plain_http = registry.split(":")[0] in _LOOPBACK or registry.startswith("[::1]")
        self.registry = registry
        self.base = f"{'http' if plain_http else 'https'}://{registry}"
        self.credentials = credentials
        self._auth: dict[str, str] = {}  # the Authorization header that worked, sent up front after
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=True, transport=transport)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transport and auth ----------------------------------------------------------------
    def _send(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        url = self.base + path
        try:
            r = self._client.request(method, url, headers={**headers, **self._auth})
            # A new scope (another repository) or an expired token brings a fresh challenge.
            if r.status_code == 401 and "www-authenticate" in r.headers:
                if self._authenticate(r.headers["www-authenticate"]):
                    r = self._client.request(method, url, headers={**headers, **self._auth})
        except httpx.TransportError as exc:
            raise RegistryUnreachable(
                f"registry {self.registry} is unreachable ({type(exc).__name__}: {exc}). "
                "Fix: check the registry address, the network, or proxy settings"
            ) from exc
        if r.status_code in (401, 403):
            who = f"as {self.credentials[0]!r}" if self.credentials else "anonymously"
            raise AuthRefused(
                f"registry {self.registry} refused {method} {path} {who} (HTTP {r.status_code}: {_error_text(r)}). "
                "Fix: check the registry connection's login and password, and that it may pull this repository; "
                "a repository that does not exist is also refused by some registries"
            )
        return r

    def _authenticate(self, challenge: str) -> bool:
        """Answer a WWW-Authenticate challenge; True when a retry may now succeed."""
        scheme, params = _parse_challenge(challenge)
        if scheme == "basic":
            if self.credentials is None:
                return False
            basic = base64.b64encode(":".join(self.credentials).encode()).decode()
            self._auth = {"Authorization": f"Basic {basic}"}
            return True
        if scheme != "bearer" or "realm" not in params:
            return False
        query = {k: params[k] for k in ("service", "scope") if k in params}
        auth = httpx.BasicAuth(*self.credentials) if self.credentials else None
        try:
            r = self._client.get(params["realm"], params=query, auth=auth)
        except httpx.TransportError as exc:
            raise RegistryUnreachable(
                f"token endpoint {params['realm']} of registry {self.registry} is unreachable ({exc})"
            ) from exc
        if r.status_code in (401, 403):
            who = f"as {self.credentials[0]!r}" if self.credentials else "anonymously"
            raise AuthRefused(
                f"registry {self.registry}: the token endpoint refused a token {who} "
                f"for scope {params.get('scope', '-')} (HTTP {r.status_code}). "
                "Fix: check the registry connection's login and password"
            )
        if r.status_code != 200:
            raise RegistryError(f"registry {self.registry}: token endpoint answered HTTP {r.status_code}")
        doc = r.json()
        token = doc.get("token") or doc.get("access_token")
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        return bool(token)

    # ---- distribution API ------------------------------------------------------------------
    def manifest(self, repository: str, reference: str) -> tuple[str, str, dict[str, Any] | None, bytes | None]:
        """(digest, media type, parsed body or None, raw body or None) of one manifest.

        HEAD first (cheap, and does not count against pull limits); GET when the registry gives
        no digest header, hashing the exact bytes it returned.
        """
        path = f"/v2/{repository}/manifests/{reference}"
        r = self._send("HEAD", path, {"Accept": ACCEPT})
        if r.status_code == 404:
            self._raise_not_found(repository, reference)
        _check_status(r, self.registry, path)
        digest = r.headers.get("docker-content-digest")
        media_type = _media_type(r)
        if digest and media_type in MANIFEST_TYPES:
            return digest, media_type, None, None
        # An index (its entries are needed), no digest header, or no usable content type: read it.
        body, raw, media_type, digest = self._get_manifest(repository, digest or reference)
        return digest, media_type, body, raw

    def _get_manifest(self, repository: str, reference: str) -> tuple[dict[str, Any], bytes, str, str]:
        path = f"/v2/{repository}/manifests/{reference}"
        r = self._send("GET", path, {"Accept": ACCEPT})
        if r.status_code == 404:
            self._raise_not_found(repository, reference)
        _check_status(r, self.registry, path)
        raw = r.content
        computed = "sha256:" + hashlib.sha256(raw).hexdigest()
        if reference.startswith("sha256:") and reference != computed:
            raise RegistryError(
                f"registry {self.registry} returned a manifest for {repository}@{reference} whose sha256 is {computed}"
            )
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise RegistryError(f"registry {self.registry}: manifest {repository}:{reference} is not JSON") from exc
        media_type = body.get("mediaType") or _media_type(r)
        if media_type not in INDEX_TYPES + MANIFEST_TYPES and "manifests" in body:
            media_type = OCI_INDEX  # an index served without a media type
        return body, raw, media_type, computed

    def blob(self, repository: str, digest: str) -> bytes:
        path = f"/v2/{repository}/blobs/{digest}"
        r = self._send("GET", path, {})
        _check_status(r, self.registry, path)
        return r.content

    def _raise_not_found(self, repository: str, reference: str) -> None:
        """Tell an unknown image from an unknown tag: the tag list answers 404 for the former."""
        r = self._send("GET", f"/v2/{repository}/tags/list", {})
        if r.status_code == 404:
            raise ImageNotFound(
                f"image {self.registry}/{repository} does not exist in the registry. "
                "Fix: check the image name (and the registry host in front of it)"
            )
        tags: list[str] = []
        if r.status_code == 200:
            tags = r.json().get("tags") or []
        shown = ", ".join(sorted(tags)[:10]) + (" ..." if len(tags) > 10 else "")
        what = "digest" if reference.startswith("sha256:") else "tag"
        raise TagNotFound(
            f"image {self.registry}/{repository} has no {what} {reference!r}"
            + (f" (tags: {shown})" if tags else "")
            + f". Fix: use an existing {what}"
        )


def _media_type(r: httpx.Response) -> str:
    return r.headers.get("content-type", "").split(";")[0].strip()


def _error_text(r: httpx.Response) -> str:
    try:
        errors = r.json().get("errors") or []
        return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or r.reason_phrase
    except ValueError:
        return r.reason_phrase


def _check_status(r: httpx.Response, registry: str, path: str) -> None:
    if r.status_code >= 400:
        raise RegistryError(f"registry {registry}: {r.request.method} {path} -> HTTP {r.status_code} ({_error_text(r)})")


def is_attestation(entry: dict[str, Any]) -> bool:
    """BuildKit lists provenance/SBOM attestations in the index as unknown/unknown manifests."""
    annotations = entry.get("annotations") or {}
    platform = entry.get("platform") or {}
    return (
        annotations.get("vnd.docker.reference.type") == "attestation-manifest"
        or (platform.get("os"), platform.get("architecture")) == ("unknown", "unknown")
    )


def pick_platform(index: dict[str, Any], platform: str = DEFAULT_PLATFORM) -> dict[str, Any] | None:
    """The index entry for `os/arch[/variant]`, skipping attestations; None when absent."""
    os_, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    for entry in index.get("manifests") or []:
        if is_attestation(entry):
            continue
        p = entry.get("platform") or {}
        if p.get("os") == os_ and p.get("architecture") == arch and (not variant or p.get("variant") == variant):
            return entry
    return None


def resolve(
    image: str,
    credentials: tuple[str, str] | None = None,
    platform: str = DEFAULT_PLATFORM,
    plain_http: bool | None = None,
    timeout_s: float = 30.0,
) -> PinnedImage:
    """Pin `image` to the digest of its `platform` manifest (and of its index, when multi-arch)."""
    ref = parse_image(image)
    with RegistryClient(ref.registry, credentials, plain_http=plain_http, timeout_s=timeout_s) as client:
        digest, media_type, body, _ = client.manifest(ref.repository, ref.reference)
        if media_type in INDEX_TYPES:
            assert body is not None
            entry = pick_platform(body, platform)
            if entry is None:
                have = sorted(
                    "{os}/{architecture}".format(**e.get("platform", {"os": "?", "architecture": "?"}))
                    for e in body.get("manifests") or []
                    if not is_attestation(e)
                )
                raise RegistryError(
                    f"image {image}: the index {digest} has no {platform} manifest (has: {', '.join(have) or 'none'}). "
                    f"Fix: use an image built for {platform}"
                )
            index_digest, platform_digest = digest, entry["digest"]
            version = (entry.get("annotations") or {}).get(VERSION_LABEL) or \
                (body.get("annotations") or {}).get(VERSION_LABEL)
            version = _version_label(client, ref, platform_digest) or version
        elif media_type in MANIFEST_TYPES or not media_type:
            # A single-platform manifest: check its config says the platform we will run on.
            index_digest, platform_digest = None, digest
            version = _check_single_platform(client, ref, digest, platform, image)
        else:
            raise RegistryError(f"image {image}: unsupported manifest media type {media_type!r}")
    return PinnedImage(
        image=image,
        registry=ref.registry,
        repository=ref.repository,
        tag=ref.tag,
        index_digest=index_digest,
        platform_digest=platform_digest,
        platform=platform,
        media_type=media_type,
        pinned_ref=f"{_pull_name(ref)}@{platform_digest}",
        version_label=version,
    )


def _pull_name(ref: ImageRef) -> str:
    """The name a kubelet pulls: Docker Hub images keep their short form."""
    if ref.registry == DOCKER_HUB:
        return "docker.io/" + ref.repository
    return ref.name


def _image_config(client: RegistryClient, ref: ImageRef, digest: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the platform manifest, its image config); the config {} when it cannot be read."""
    body, _, _, _ = client._get_manifest(ref.repository, digest)
    config_digest = (body.get("config") or {}).get("digest")
    if not config_digest:
        return body, {}
    try:
        config = json.loads(client.blob(ref.repository, config_digest))
    except (ValueError, RegistryError):
        return body, {}  # an unreadable config does not stop pinning; the kubelet checks the platform too
    return body, config if isinstance(config, dict) else {}


def _label(manifest: dict[str, Any], config: dict[str, Any]) -> str | None:
    """org.opencontainers.image.version: the config's label (docker build --label, LABEL), else the
    manifest's annotation."""
    labels = (config.get("config") or {}).get("Labels") or {}
    return labels.get(VERSION_LABEL) or (manifest.get("annotations") or {}).get(VERSION_LABEL)


def _version_label(client: RegistryClient, ref: ImageRef, digest: str) -> str | None:
    """The platform image's version label; None where the image says none or it cannot be read."""
    try:
        return _label(*_image_config(client, ref, digest))
    except RegistryError:
        return None


def _check_single_platform(client: RegistryClient, ref: ImageRef, digest: str, platform: str,
                           image: str) -> str | None:
    """Refuse a single image of another platform; its version label, when it has one."""
    body, config = _image_config(client, ref, digest)
    got = f"{config.get('os')}/{config.get('architecture')}"
    if config.get("os") and got != "/".join(platform.split("/")[:2]):
        raise RegistryError(f"image {image} is a single {got} image, not {platform}. Fix: use an image built for {platform}")
    return _label(body, config)


# ---- CLI -------------------------------------------------------------------------------------
def credentials_from_env() -> tuple[str, str] | None:
    user, password = os.environ.get("DAYONE_REGISTRY_USERNAME"), os.environ.get("DAYONE_REGISTRY_PASSWORD")
    return (user, password) if user and password is not None else None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pin",
        help="resolve an image tag to its index and linux/amd64 digests",
        description="Credentials come from DAYONE_REGISTRY_USERNAME / DAYONE_REGISTRY_PASSWORD when set.",
    )
    p.add_argument("image", help="IMAGE[:TAG|@DIGEST]")
    p.add_argument("--platform", default=DEFAULT_PLATFORM)
    p.add_argument("--plain-http", action="store_true", help="talk HTTP, not HTTPS (loopback registries do by default)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        pinned = resolve(args.image, credentials_from_env(), args.platform, plain_http=args.plain_http or None)
    except RegistryError as exc:
        print(f"dayone pin: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(pinned.as_dict(), indent=2))
    return 0


def pinned_from_config(engine: Any) -> dict[str, Any] | None:
    """The pin an engine carries in its config (engines[].digest or an image@digest), if any."""
    return pinned_from_ref(engine.image or "", engine.digest)


def pinned_from_ref(image: str, digest: str | None = None) -> dict[str, Any] | None:
    """The pin an image reference carries (IMAGE@digest, or a digest given beside it), if any."""
    ref = parse_image(image)
    digest = digest or ref.digest
    if not digest:
        return None
    name = ref.name if not ref.registry.startswith("registry-1.") else "docker.io/" + ref.repository
    return {
        "image": image,
        "registry": ref.registry,
        "repository": ref.repository,
        "tag": ref.tag,
        "index_digest": None,
        "platform_digest": digest,
        "pinned_ref": f"{name}@{digest}",
        "source": "config",
    }
