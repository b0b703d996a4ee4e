"""A measuring step's task: a KubernetesPodOperator that, under kubernetes.measure_from: cluster, runs
`dayone step` in a runner pod beside the engine (deferrable; logs into the task's log; the pod deleted
when done or killed) and, under worker (or a local target, or a dry run), runs the step on this worker.

One task class for both, because measure_from is run conf and the graph is fixed at parse: a branch per
step would double the measuring tasks and thread skips through their trigger rules. Both ways record the
step's outcome through tasks/steps/execution.py in the run's storage, and the task returns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from tasks.steps.runner_pods import CONTAINER, SKIP_EXIT_CODES


class StepPodOperator(KubernetesPodOperator):
    """Step `step` for `engine` (a mapped engine name). With `together` (a performance scenario), the
    first engine of a position measures the position's engines together (once the others have ended
    their task `arrived_task_id`, if given) and the others' tasks record its outcome as theirs (turns.py)."""

    template_fields: Sequence[str] = (*KubernetesPodOperator.template_fields, "engine")

    def __init__(self, *, step: str, engine: str, together: bool = False, arrived_task_id: str | None = None,
                 **kwargs: Any):
        super().__init__(deferrable=True, get_logs=True, on_finish_action="delete_pod", on_kill_action="delete_pod",
                         skip_on_exit_code=list(SKIP_EXIT_CODES), base_container_name=CONTAINER,
                         do_xcom_push=False, log_events_on_startup=False,
                         termination_message_policy="FallbackToLogsOnError", **kwargs)
        self.step, self.engine, self.together, self.arrived_task_id = step, engine, together, arrived_task_id

    # ---- which way --------------------------------------------------------------------------
    def _engines(self, context: Any) -> list[str]:
        if not self.together:
            return [self.engine]
        from dayone_airflow.turns import engine_turn

        return list(engine_turn(context, self.engine)[0]["together"])

    def _in_pod(self, context: Any, engines: list[str] | None = None) -> Any:
        """The run config when this step runs in a runner pod; None when it runs on this worker. A step
        whose engines are none of them ready runs here too: it is not attempted, and a pod placed beside
        an engine pod that never started would wait unschedulable until its startup timeout."""
        from tasks.config import ConfigError
        from tasks.steps.registry import STEPS

        from dayone_airflow.glue import config_from_params, trigger_conf
        from tasks.steps.context import load_config

        try:
            cfg = load_config(config_from_params(context["params"], trigger_conf()), "runner")
        except ConfigError:
            return None  # the worker's way records the rejected config as the step's outcome
        if cfg.target != "kubernetes" or cfg.kubernetes.measure_from != "cluster" or cfg.dry_run:
            return None
        if not STEPS[self.step].enabled(cfg):
            return None  # switched off: recorded here, no pod
        if engines is not None:
            from tasks.state.documents import readiness

            from dayone_airflow.glue import run_dir

            state = run_dir(context["run_id"])
            if not any(readiness(state, e).ready for e in engines):
                return None
        return cfg

    def _configure(self, context: Any, cfg: Any, engines: list[str]) -> None:
        """The runner pod of this step (tasks/steps/runner_pods.py) and how to reach and watch it."""
        import os

        from tasks.steps.runner_pods import pods_for_step, runner_step_pod
        from tasks.state.object_store import STAGING_ENV

        from dayone_airflow.connections import staging_store
        from dayone_airflow.glue import dayone_run_id

        store = staging_store()
        if store is None:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"kubernetes.measure_from: cluster keeps the run's state where its runner pods "
                                       f"reach it: set {STAGING_ENV}=s3://BUCKET/PREFIX on the workers "
                                       "(docs/deploy.md, 'Run state in S3'), or measure_from: worker")
        k8s, runner = cfg.kubernetes, cfg.kubernetes.runner
        self.kubernetes_conn_id = k8s.conn_id
        self.namespace = k8s.namespace
        run_id, staging = dayone_run_id(context["run_id"]), os.environ[STAGING_ENV].strip()
        pods = pods_for_step(cfg, self.step)  # more than one: peers measure the big rounds with it
        self.pod_template_dict = runner_step_pod(cfg, self.step, engines, run_id, staging, store.access.endpoint_url,
                                                 shard=0, pods=pods)
        self._peer_pods = [runner_step_pod(cfg, self.step, engines, run_id, staging, store.access.endpoint_url,
                                           shard=k, pods=pods) for k in range(1, pods)]
        self.watch(runner)

    def watch(self, runner: Any) -> None:
        """How the deferred wait reads the pod (kubernetes.runner): its state every poll_interval_s, and the
        log lines it printed since every log_interval_s, into the task's log while it runs."""
        self.poll_interval = runner.poll_interval_s
        self.startup_timeout_seconds = runner.startup_timeout_s
        self.startup_check_interval_seconds = max(1, int(runner.poll_interval_s))
        self.logging_interval = runner.log_interval_s

    # ---- the two ways -------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        engines = [self.engine]
        if self.together:
            from dayone_airflow.turns import measured_with_first, measuring_engines

            engines = measuring_engines(context, self.step, self.engine, self.arrived_task_id)  # may reschedule: a wait holds no slot
            if engines is None:
                return measured_with_first(context, self.step, self.engine)
        cfg = self._in_pod(context, engines)
        if cfg is None:
            return self._on_worker(context, engines)
        self._configure(context, cfg, engines)
        self._start_peers(context, engines)
        return super().execute(context)  # defers to the pod trigger; trigger_reentry ends it

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> Any:
        # a resumed task is a fresh operator: it learns the pod's cluster again from the run config
        cfg = self._in_pod(context)
        if cfg is not None:
            self.kubernetes_conn_id = cfg.kubernetes.conn_id
            self.namespace = cfg.kubernetes.namespace
        try:
            super().trigger_reentry(context, event)
        finally:
            if cfg is not None:
                self._delete_peers(self._peer_selector(context, self._engines(context)))
        return self._recorded(context)

    def on_kill(self) -> None:
        super().on_kill()
        if getattr(self, "_peers_selected", None):
            self._delete_peers(self._peers_selected)

    # ---- peer pods: a step's big rounds measured by several runner pods (tasks/load/pod_shards.py) --
    def _peer_selector(self, context: Any, engines: list[str]) -> str:
        from tasks.k8s.manifests import LABEL_RUN, label_value
        from tasks.steps.runner_pods import LABEL_SHARD_OF
        from tasks.load.pod_shards import pod_group

        from dayone_airflow.glue import dayone_run_id

        return (f"{LABEL_SHARD_OF}={label_value(pod_group(self.step, engines))},"
                f"{LABEL_RUN}={label_value(dayone_run_id(context['run_id']))}")

    def _start_peers(self, context: Any, engines: list[str]) -> None:
        """The peer pods, created beside the step's own (an earlier try's deleted first); they measure what
        the step's pod hands them and leave when it says so."""
        if not getattr(self, "_peer_pods", None):
            return
        self._peers_selected = self._peer_selector(context, engines)
        self._delete_peers(self._peers_selected)
        for pod in self._peer_pods:
            self.client.create_namespaced_pod(self.namespace, pod)
            self.log.info("runner pod shard %s created", pod["metadata"]["name"])

    def _delete_peers(self, selector: str) -> None:
        from kubernetes.client.exceptions import ApiException

        for pod in self.client.list_namespaced_pod(self.namespace, label_selector=selector).items:
            try:
                self.client.delete_namespaced_pod(pod.metadata.name, self.namespace)
            except ApiException as exc:
                if exc.status != 404:  # gone already: what was wanted
                    raise

    def _recorded(self, context: Any) -> dict[str, Any]:
        """What the pod's `dayone step` recorded: the step's outcome per engine, from the run's storage."""
        from tasks.state.documents import outcome_doc

        from dayone_airflow.glue import run_dir

        state = run_dir(context["run_id"])
        engines = self._engines(context)
        return {"step": self.step, "measured_in": "runner pod",
                "outcomes": {e: state.read_json(outcome_doc(self.step, e)) for e in engines}}

    def _on_worker(self, context: Any, engines: list[str]) -> Any:
        from airflow.sdk.exceptions import AirflowFailException

        from tasks.steps.engine_steps import RequestsFailed

        from dayone_airflow.glue import run_step

        target: str | list[str] = engines if self.together else engines[0]
        try:
            return run_step(self.step, context["params"], context["run_id"], target)
        except RequestsFailed as exc:  # measured, and most requests failed: a verdict a retry cannot change
            raise AirflowFailException(str(exc)) from None
