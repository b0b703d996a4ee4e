"""How DayOne reaches an engine's endpoint: its API key and its TLS trust.

The key comes from the engine's Airflow connection (`api_key_connection`: its password) or a
Kubernetes Secret (`api_key_secret`: read through the run's cluster access), never from the run
config or params, which are archived. It is resolved when a step builds its endpoint, sent as
`Authorization: Bearer` on every request to the engine (readiness, checks, load client, warmup,
needles, cache, capacity, /metrics scrapes), and scrubbed from everything DayOne publishes
(`secrets` goes to desensitize). TLS: `tls_ca_bundle` trusts an internal CA, `tls_verify: false`
skips verification; the load client's own connections and httpx share one context.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from tasks.core.desensitize import register_secret

if TYPE_CHECKING:
    import httpx

    from tasks.config import RunConfig
    from tasks.config.engines import EngineSpec

# Looks up an Airflow connection's password by id (the glue: BaseHook; elsewhere AIRFLOW_CONN_<ID>).
ConnectionPassword = Callable[[str], "str | None"]
# Reads one key of a Kubernetes Secret: (secret name, key) -> value.
SecretValue = Callable[[str, str], str]


class ApiKeyMissing(RuntimeError):
    """The engine's config names a key source that yields no key."""


@dataclass(frozen=True)
class EndpointAccess:
    """What every request to one engine carries: the API key (never printed) and the TLS trust."""

    api_key: str | None = field(default=None, repr=False)
    ca_bundle: str | None = None  # a PEM file of the CA(s) that signed the endpoint's certificate
    verify: bool = True  # False: an https endpoint's certificate is not checked

    def __post_init__(self) -> None:
        register_secret(self.api_key)  # scrubbed from all this process publishes, whatever its shape

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values desensitize must scrub from anything published."""
        return (self.api_key,) if self.api_key else ()

    def ssl_context(self) -> ssl.SSLContext:
        return _ssl_context(self.ca_bundle, self.verify)

    def http_client(self, **kwargs: Any) -> httpx.Client:
        """An httpx client for the engine's control paths (checks, scrapes, tokenize, cache clear)."""
        import httpx

        return httpx.Client(headers=self.headers(), verify=self.ssl_context(), **kwargs)

    def async_http_client(self, **kwargs: Any) -> httpx.AsyncClient:
        import httpx

        return httpx.AsyncClient(headers=self.headers(), verify=self.ssl_context(), **kwargs)


@functools.lru_cache(maxsize=8)
def _ssl_context(ca_bundle: str | None, verify: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_bundle)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def env_connection_password(conn_id: str) -> str | None:
    """An Airflow connection's password from AIRFLOW_CONN_<ID> (URI or JSON), the variable Airflow
    itself reads, so `dayone step` outside Airflow finds the same connection."""
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}", "").strip()
    if not raw:
        raise ApiKeyMissing(f"connection {conn_id!r} is not defined (AIRFLOW_CONN_{conn_id.upper()} is unset)")
    if raw.startswith("{"):
        return json.loads(raw).get("password")
    password = urlsplit(raw).password
    return None if password is None else unquote(password)


def cluster_secret_value(api_client: Any, namespace: str) -> SecretValue:
    """Reads Secret keys in the run's namespace with the run's cluster API client."""

    def read(name: str, key: str) -> str:
        from kubernetes import client

        secret = client.CoreV1Api(api_client).read_namespaced_secret(name, namespace)
        data = (secret.data or {}).get(key)
        if data is None:
            raise ApiKeyMissing(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode("utf-8").strip()

    return read


def access_for(spec: EngineSpec, connection_password: ConnectionPassword | None = None,
               secret_value: SecretValue | None = None) -> EndpointAccess:
    """The engine's access, its key read from the source its config names."""
    key = None
    if spec.api_key_connection:
        key = (connection_password or env_connection_password)(spec.api_key_connection)
        if not key:
            raise ApiKeyMissing(f"engine {spec.name}: connection {spec.api_key_connection!r} has no password "
                                "(the API key goes in the connection's password field)")
    elif spec.api_key_secret is not None:
        if secret_value is None:
            raise ApiKeyMissing(f"engine {spec.name}: api_key_secret needs cluster access to read the Secret")
        key = secret_value(spec.api_key_secret.name, spec.api_key_secret.key)
        if not key:
            raise ApiKeyMissing(f"engine {spec.name}: Secret {spec.api_key_secret.name!r} key "
                                f"{spec.api_key_secret.key!r} is empty")
    return EndpointAccess(api_key=key, ca_bundle=spec.tls_ca_bundle, verify=spec.tls_verify)


def api_key_env(engine: str) -> str:
    """The variable a runner pod holds an engine's API key in, filled by the kubelet from the engine's
    api_key_secret (tasks/steps/runner_pods.py): the pod reads no Secret through the API."""
    return "DAYONE_API_KEY_" + re.sub(r"[^A-Z0-9]", "_", engine.upper())


def run_secret_value(config: RunConfig, api_client: Callable[[str], Any] | None) -> SecretValue | None:
    """Secret reads through the run's cluster access (its API client factory, by connection id)."""
    if api_client is None:
        return None
    return lambda name, key: cluster_secret_value(api_client(config.kubernetes.conn_id),
                                                  config.kubernetes.namespace)(name, key)


# ---- the CLIs against a running endpoint (dayone bench, check, longctx, cache) ---------------------


def add_access_args(p: Any) -> None:
    """--api-key-env, --ca-bundle, --insecure on an argparse parser."""
    p.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the endpoint's API key (sent as Authorization: Bearer); "
                        "never the key itself on the command line, where ps and shell history keep it")
    p.add_argument("--ca-bundle", metavar="PEM", help="CA certificate(s) that signed an https endpoint's certificate")
    p.add_argument("--insecure", action="store_true", help="do not verify an https endpoint's certificate")


def tls_fields(args: Any) -> dict[str, Any]:
    """The engine-config fields the TLS arguments set."""
    out: dict[str, Any] = {}
    if args.ca_bundle:
        out["tls_ca_bundle"] = args.ca_bundle
    if args.insecure:
        out["tls_verify"] = False
    return out


def access_from_args(args: Any, spec: EngineSpec) -> EndpointAccess:
    """The endpoint's access: the key from the variable --api-key-env names, the TLS trust from the config."""
    from tasks.config import ConfigError

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "").strip()
        if not key:
            raise ConfigError([("--api-key-env", f"the environment variable {args.api_key_env} is unset or empty",
                                f"export {args.api_key_env}=<the endpoint's API key>")])
    return EndpointAccess(api_key=key, ca_bundle=spec.tls_ca_bundle, verify=spec.tls_verify)
