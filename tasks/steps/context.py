"""The run context: built once per task from the validated config, handed to every step.

It carries what a step needs from outside the config: the run's storage (`run_dir`: a directory
on this machine, or the run's prefix under the S3 staging prefix, so that every step of a run finds
what the earlier ones left whichever worker or pod ran them), how to reach the cluster and the
registry (`ClusterAccess`), how to build an S3 client for the archive, and, for a dated run (the
nightly, a backfill), its logical date. The Airflow glue builds it from connections (run state:
the `dayone_s3` connection and DAYONE_STAGING) and the task's context; `dayone step` builds it from
the environment (DAYONE_STAGING, AWS_*, DAYONE_S3_ENDPOINT_URL). Nothing is set on module globals.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tasks.config import RunConfig, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir, run_id_of
from tasks.state.documents import manifest, readiness
from tasks.state.object_store import Store, staging_from_env

if TYPE_CHECKING:
    from tasks.engines.access import EndpointAccess
    from tasks.targets.base import Deployment, Target
    from tasks.targets.kubernetes import ClusterAccess


NOT_ATTEMPTED_EXIT = 99  # `dayone step`'s exit code, and the runner pod's skip_on_exit_code: a step not attempted is a skipped task


class NotAttempted(RuntimeError):
    """The step was not attempted, e.g. its engine never became ready; the message says why."""


def load_config(config: dict[str, Any] | RunConfig, run_id: str) -> RunConfig:
    """The validated config with its run id; a bad config raises ConfigError naming every field."""
    if isinstance(config, RunConfig):
        return config if config.run_id == run_id else config.model_copy(update={"run_id": run_id})
    return parse_run_config({**config, "run_id": run_id})


@dataclass
class RunContext:
    config: RunConfig  # validated, with its run id
    run_dir: RunDir
    cluster: ClusterAccess | None = None  # None: kubeconfig and environment credentials
    archive_client: Callable[[], Any] | None = None  # builds the archive's boto3 S3 client
    logical_date: dt.datetime | None = None  # a dated run pins from the digest catalog
    accepted_run_ids: tuple[str, ...] = ()  # the nightly: runs a person accepted as the new level (tasks/compare/nightly.py)
    backfill: bool = False
    # an Airflow connection's password by id, for engines' API keys; None: AIRFLOW_CONN_<ID>
    connection_password: Callable[[str], str | None] | None = None

    @classmethod
    def build(cls, config: dict[str, Any] | RunConfig, run_id: str, staging: Store | None = None,
              **services: Any) -> RunContext:
        """`staging`: where runs keep their state; default DAYONE_STAGING reached with the AWS_*
        environment, else this machine's DAYONE_WORKDIR."""
        cfg = load_config(config, run_id)
        return cls(cfg, RunDir(run_id, staging or staging_from_env()), **services)

    @property
    def run_id(self) -> str:
        return run_id_of(self.config, self.run_dir)

    @cached_property
    def target(self) -> Target:
        if self.config.target == "local":
            from tasks.targets.local import LocalTarget

            return LocalTarget(self.run_dir)
        from tasks.targets.kubernetes import KubernetesTarget

        return KubernetesTarget(self.cluster)

    def s3(self) -> Any:
        if self.archive_client is None:
            raise RuntimeError("no archive client was given to this run context (the CLI reads AWS_* and "
                               "DAYONE_S3_ENDPOINT_URL; the DAG reads the archive connection)")
        return self.archive_client()

    def planned(self) -> None:
        """Raise NotAttempted when the run was never planned (its config was rejected)."""
        if manifest(self.run_dir) is None:
            raise NotAttempted(f"run {self.run_id} was never planned (its config was rejected); nothing to do")

    def deployment(self, engine: str) -> Deployment:
        from tasks.targets.base import Deployment

        dep = Deployment.load(self.run_dir, engine)
        if dep is None:
            raise NotAttempted(f"engine {engine}: not deployed")
        return dep

    def engine(self, engine: str) -> EngineContext:
        """What a scenario talks to: the engine's endpoint, once the engine is ready."""
        ready = readiness(self.run_dir, engine)
        if not ready.ready:
            raise NotAttempted(f"engine {engine}: not ready ({ready.detail or 'never deployed'}); step not attempted")
        dep = self.deployment(engine)
        return EngineContext(self.config, endpoint_for(self.config, engine, dep.base_url, dep.image_digest,
                                                     self.endpoint_access(engine)), self.run_dir)

    def endpoint_access(self, engine: str) -> EndpointAccess:
        """The engine's API key (its connection, or a Secret read with the run's cluster access) and TLS trust."""
        from tasks.engines.access import access_for, api_key_env, run_secret_value

        spec = self.config.engine(engine)
        api_client = None
        from_pod = os.environ.get(api_key_env(engine)) if spec.api_key_secret is not None else None
        if from_pod:  # a runner pod: the kubelet filled it from the Secret
            return access_for(spec, secret_value=lambda name, key: from_pod)
        if spec.api_key_secret is not None:
            from tasks.targets.kubernetes import ClusterAccess

            api_client = (self.cluster or ClusterAccess()).api_client
        return access_for(spec, self.connection_password, run_secret_value(self.config, api_client))

    def read_api_keys(self) -> None:
        """Read every engine's API key in this process, so desensitize scrubs each from what it publishes
        (the archive and the report may run on a worker that measured nothing)."""
        for spec in self.config.engines:
            if spec.api_key_connection or spec.api_key_secret is not None:
                self.endpoint_access(spec.name)

    def restart_count(self, engine: str) -> Callable[[], int | None]:
        dep = self.deployment(engine)
        return lambda: self.target.restart_count(dep)
