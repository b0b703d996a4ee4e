"""Where the measuring steps run on Kubernetes: on the Airflow worker, or in runner pods of their own
beside the engine (KubernetesPodOperator, docs/deploy.md "Measuring from inside the cluster")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from tasks.config.base import ConfigModel, Fix, PositiveInt


class S3SecretRef(ConfigModel):
    name: str = Field(..., min_length=1, description="Kubernetes Secret in the run's namespace with the S3 keys.")
    access_key_id_key: str = Field("access-key-id", min_length=1, description="Key holding the access key id.")
    secret_access_key_key: str = Field("secret-access-key", min_length=1, description="Key holding the secret key.")


class RunnerPodSettings(ConfigModel):
    """The runner pods of measure_from: cluster (the locked-down pod of `dayone render --runner-pod-template`)."""

    image: Annotated[str | None, Fix("give the runner image (docker/), by digest: REGISTRY/dayone-runner@sha256:...")] = Field(
        None, min_length=1, description="The runner image (docker/); required for measure_from: cluster.")
    service_account: str = Field("dayone-runner", min_length=1,
                                 description="Service account of the runner pods (reads the engine's pods for restarts).")
    cpu: Annotated[PositiveInt, Fix("give whole cores, e.g. 4: requests equal limits (Guaranteed QoS) only "
                                    "pin cores when they are integers")] = Field(
        2, description="Cores of a runner pod, requested and limited alike (Guaranteed QoS): the client's own.")
    memory: str = Field("4Gi", min_length=1, description="Memory of a runner pod, requested and limited alike.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Place runner pods by node labels instead of beside the engine's pod.")
    affinity: dict[str, Any] | None = Field(
        None, description="A pod affinity of your own (Kubernetes' Affinity); replaces the default, the engine's node.")
    s3_secret: Annotated[S3SecretRef | None, Fix("name the Secret holding the staging S3 keys, e.g. "
                                                  "{name: dayone-s3}", inside=True)] = Field(
        None, description="Secret with the S3 keys the runner pods reach the run's staging with; "
                          "required for measure_from: cluster.")
    max_pods: Annotated[PositiveInt, Fix("give the most runner pods one step may take, an integer >= 1 (1: never "
                                         "shard across pods)")] = Field(
        8, description="Most runner pods measuring one step's rounds together: a round asking for more streams "
                       "than load.streams_per_process x cpu takes one pod per that many, up to this.")
    startup_timeout_s: PositiveInt = Field(600, description="How long a runner pod may take to be scheduled and start.")
    poll_interval_s: float = Field(2.0, gt=0, description="How often the deferred wait reads the runner pod.")
    log_interval_s: Annotated[PositiveInt, Fix("give whole seconds >= 1 between the reads of a running pod's log, "
                                                "e.g. 10")] = Field(
        10, description="How often the pod's new log lines are copied into the task's log while the pod runs "
                        "(KubernetesPodOperator's logging_interval; the rest when it ends).")


class MeasureFrom(ConfigModel):
    """Mixed into KubernetesSettings: measure_from and its runner pods."""

    measure_from: Annotated[Literal["worker", "cluster"], Fix(
        "use 'worker' (the Airflow worker measures) or 'cluster' (runner pods beside the engines)")] = Field(
        "worker", description="worker: the Airflow worker runs the measuring steps; cluster: each runs in a runner "
                              "pod of its own beside the engine (KubernetesPodOperator). Default worker: it needs "
                              "no runner image in a registry and no S3 staging.")
    runner: RunnerPodSettings = Field(RunnerPodSettings(), description="The runner pods of measure_from: cluster.")

    @model_validator(mode="after")
    def _runner_needs(self) -> MeasureFrom:
        if self.measure_from != "cluster":
            return self
        if not self.runner.image:
            raise ValueError("runner.image: required when measure_from is cluster. Fix: give the runner image "
                             "(docker/) by digest, REGISTRY/dayone-runner@sha256:...")
        if self.runner.s3_secret is None:
            raise ValueError("runner.s3_secret: required when measure_from is cluster (the pods reach the run's "
                             "staging in S3). Fix: name the Secret with the S3 keys, e.g. {name: dayone-s3}")
        return self
