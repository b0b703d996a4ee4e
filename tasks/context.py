"""What a scenario or a check talks to: one served engine, with its adapter."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.config import RunConfig
from tasks.engines import EngineAdapter, adapter_for
from tasks.staging import RunDir


@dataclass(frozen=True)
class EngineEndpoint:
    run_id: str
    engine: str
    image_digest: str
    base_url: str
    model: str
    adapter: EngineAdapter = field(compare=False)
    request_timeout_s: float = 600.0

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
class StepContext:
    """Everything a step needs: the validated config, the endpoint, and where rows go."""

    config: RunConfig
    endpoint: EngineEndpoint
    run_dir: RunDir


def endpoint_for(config: RunConfig, engine: str, base_url: str, image_digest: str) -> EngineEndpoint:
    spec = config.engine(engine)
    return EngineEndpoint(
        run_id=config.run_id or "adhoc",
        engine=engine,
        image_digest=image_digest,
        base_url=base_url,
        model=config.model.name,
        adapter=adapter_for(spec.dialect),
        request_timeout_s=config.request_timeout_s,
    )
