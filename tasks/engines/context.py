"""An engine's context: what a scenario or a check talks to (one served engine, with its adapter) and
where its rows go. The run's own context is tasks/steps/context.py's RunContext."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tasks.config import RunConfig
from tasks.engines.access import EndpointAccess, access_for
from tasks.engines import EngineAdapter, adapter_for
from tasks.state.storage import RunDir, run_id_of

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class EngineEndpoint:
    run_id: str
    engine: str
    image_digest: str
    base_url: str
    model: str
    adapter: EngineAdapter = field(compare=False)
    request_timeout_s: float = 600.0
    # the API key and TLS trust every request to the engine carries (tasks/engines/access.py)
    access: EndpointAccess = field(default_factory=EndpointAccess, compare=False, repr=False)

    def http_client(self, timeout_s: float | None = None) -> "httpx.Client":
        """An httpx client for the engine's control paths, with its key and TLS trust."""
        return self.access.http_client(timeout=self.request_timeout_s if timeout_s is None else timeout_s)

    def row_keys(self, scenario: str, round_: int = 0) -> dict[str, object]:
        """The columns every result row carries."""
        return {
            "run_id": self.run_id,
            "engine": self.engine,
            "image_digest": self.image_digest,
            "scenario": scenario,
            "round": round_,
        }


@dataclass(frozen=True)
class EngineContext:
    """What an engine's step needs: the validated config, the engine's endpoint, and where rows go."""

    config: RunConfig
    endpoint: EngineEndpoint
    run_dir: RunDir


def endpoint_for(config: RunConfig, engine: str, base_url: str, image_digest: str,
                 access: EndpointAccess | None = None) -> EngineEndpoint:
    """`access`: the engine's resolved key and TLS trust; None: read from the sources the engine's config
    names with the defaults outside Airflow (AIRFLOW_CONN_<ID>)."""
    spec = config.engine(engine)
    return EngineEndpoint(
        run_id=run_id_of(config),
        engine=engine,
        image_digest=image_digest,
        base_url=base_url,
        model=config.model.name,
        adapter=adapter_for(spec.dialect),
        request_timeout_s=config.request_timeout_s,
        access=access or access_for(spec),
    )
