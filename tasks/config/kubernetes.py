"""The cluster engines run on when target is kubernetes: namespace, connection, readiness wait, model volume."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tasks.config.base import ConfigModel, PositiveInt
from tasks.config.runner_pods import MeasureFrom


class KubernetesSettings(MeasureFrom, ConfigModel):
    namespace: str = Field("dayone", description="Namespace of the engine pods and services.")
    conn_id: str = Field("kubernetes_default", description="Airflow connection of the cluster.")
    startup_timeout_s: PositiveInt = Field(1800, description="Readiness wait, covering a cold start.")
    registry_conn_id: str | None = Field(None, description="Airflow connection with registry credentials.")
    model_volume_claim: str | None = Field(None, description="PVC holding the model weights.")
    model_mount_path: str = Field("/models", description="Where the model volume is mounted in the pod.")
    service_account: str = Field("dayone-engine", description="Service account of the engine pods.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Pod tolerations, e.g. for GPU taints.")
    gpu_memory_interval_s: float | None = Field(
        5.0, gt=0, le=3600, description="How often the engine's pod prints nvidia-smi's used and total memory per GPU "
        "into its log (memory per card after readiness and after each load step); null: not read.")
    cleanup_age_s: PositiveInt = Field(6 * 3600, description="Cleanup removes DayOne objects older than this.")
    run_as_user: int | None = Field(
        1000, ge=0, description="UID of engine containers (non-root); None keeps the image's own user (often root)."
    )
