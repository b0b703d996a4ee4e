"""A distributed Airflow on this machine, as a deployment runs it: nothing shared but the services.

PostgreSQL (metadata database and Celery result backend) and Redis (Celery broker), private instances
on free loopback ports; a SeaweedFS S3 server (tasks/state/local_s3.py) for the archive; Airflow's API server,
scheduler, DAG processor and triggerer; and Celery workers (CeleryExecutor), each a host of its own
(nodes.py): its own network namespace and address on a bridge, its own host name (UTS namespace, the
`hostname` of the task instances it runs), its own /tmp and disk (mount namespace, a tmpfs holding its
HOME, AIRFLOW_HOME and DAYONE_WORKDIR). A worker reaches the services on its loopback
(loopback_forward.py), and the engines it or another worker started only at their address on the bridge
(DAYONE_ENGINE_HOST). The file audit (file_audit.py) records every open by one worker of a file on another
worker's disk: `assert_no_cross_node_reads` fails on any, so whatever one worker hands another goes through
S3. Every component gets the `dayone_s3` connection as AIRFLOW_CONN_DAYONE_S3, as `make ui` gives it, and
keeps run state under the S3 prefix DAYONE_STAGING names. Only code is shared: the DAGs folder and the
plugins, as a deployment's image carries them (plus planted_dag.py, the audit's own test).

    with DistributedAirflow(state_dir) as stack:
        run_id = stack.trigger("dayone_eval", conf)
        stack.wait_for_run("dayone_eval", run_id)

Debian's postgresql and redis-server provide the servers, iproute2 and util-linux the namespaces
(`make system-packages` installs them; as root, so does `require_system_packages`). PostgreSQL refuses to run as root: when this runs as root,
its cluster lives in a directory of its own under /tmp owned by the `postgres` user, who runs it.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from nodes import Node, NodeNetwork
from run_progress import RunStalled, ended_tasks, wait_while_moving
from stack_priority import lower_priority_of, stack_env

from dayone_airflow.ui import BUSY_MACHINE_TIMEOUTS
from tasks.state.local_s3 import SeaweedS3
from tasks.core.ports import free_ports
from tasks.core.polling import TimedOut, poll
from tasks.core.processes import alive, start_group, stop_group

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
POSTGRES_ROOT = Path("/usr/lib/postgresql")  # Debian: /usr/lib/postgresql/VERSION/bin, not on PATH
ARCHIVE_CONN_ENV = "AIRFLOW_CONN_DAYONE_S3"
ADMIN = "admin"
WORKERS = ("worker-a", "worker-b")
QUEUE = "default"  # Airflow's [operators] default_queue: every worker consumes it
# A worker's task instance that stops heartbeating (its worker died) is failed, and retried, after this long.
TASK_HEARTBEAT_TIMEOUT_S = 20
LOG_TAIL_LINES = 60
# Run state: an S3 prefix every worker reaches (tasks/state/object_store.py), through the same dayone_s3 connection.
STAGING = "s3://dayone-staging/runs"


class StackError(RuntimeError):
    """A component would not start or died; the message carries the tail of its log."""


class CrossNodeRead(AssertionError):
    """A worker opened a file another worker wrote: something one node handed another without S3."""


# ---- system packages --------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory."""
    found = [p.parent for p in POSTGRES_ROOT.glob("*/bin/initdb")]
    return max(found, key=lambda p: float(p.parent.name) if p.parent.name.replace(".", "").isdigit() else 0.0,
               default=None)


def redis_server() -> str | None:
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def require_system_packages() -> tuple[Path, str]:
    """PostgreSQL's bin directory and redis-server; installed from Debian's packages when missing and we
    are root (what `make system-packages` does), else StackError saying what to install."""
    def missing() -> list[str]:
        return [pkg for pkg, found in (("postgresql", postgres_bin()), ("redis-server", redis_server()),
                                       ("iproute2", shutil.which("ip")), ("util-linux", shutil.which("unshare")))
                if not found]

    if (packages := missing()) and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        lock = ["-o", "DPkg::Lock::Timeout=600"]
        subprocess.run(["apt-get", *lock, "update"], check=True, capture_output=True, env=env, timeout=900)
        subprocess.run(["apt-get", *lock, "install", "-y", "--no-install-recommends", *packages], check=True,
                       capture_output=True, env=env, timeout=1800)
        packages = missing()
    if packages:
        raise StackError(f"missing Debian packages: {' '.join(packages)}. Fix: make system-packages (as root), or "
                         f"sudo apt-get install {' '.join(packages)}")
    return postgres_bin(), redis_server()  # type: ignore[return-value]


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def _tails(components) -> str:
    """The last lines of each component's log, for a wait that gave up."""
    return "\n".join(f"--- {c.name}\n{_tail(c.log, 20)}" for c in components)


def _wait(what: str, check: Callable[[], Any], timeout_s: float, watched: Iterable[Component] = (),
          interval_s: float = 0.5) -> Any:
    """check() until it returns a value; StackError when a watched component dies or time runs out."""
    watched = list(watched)

    def step() -> Any:
        for component in watched:
            if component.proc.poll() is not None:
                raise StackError(f"{component.name} exited with {component.proc.returncode} while waiting for "
                                 f"{what}; its log ends:\n{_tail(component.log)}")
        try:
            return check()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            return None

    try:
        return poll(step, timeout_s=timeout_s, interval_s=interval_s)
    except TimedOut:
        raise StackError(f"{what}: not after {timeout_s:.0f} s\n{_tails(watched)}") from None


@dataclass
class Component:
    name: str
    proc: subprocess.Popen
    log: Path


# ---- PostgreSQL and Redis ---------------------------------------------------------------------------


class PostgresServer:
    """A private PostgreSQL cluster on a free loopback port: database `airflow`, user `airflow` (trust
    authentication, loopback only), durability off (a test's database)."""

    DATABASE = "airflow"
    USER = "airflow"

    def __init__(self, bindir: Path, log: Path):
        self.bindir, self.log = bindir, log
        self.port = 0
        self.root: Path | None = None
        self.component: Component | None = None

    @property
    def sqlalchemy_url(self) -> str:
        return f"postgresql+psycopg2://{self.USER}@127.0.0.1:{self.port}/{self.DATABASE}"

    @property
    def result_backend_url(self) -> str:
        return f"db+postgresql+psycopg2://{self.USER}@127.0.0.1:{self.port}/{self.DATABASE}"

    def _demote(self) -> tuple[Callable[[], None] | None, dict[str, str]]:
        """Run as `postgres` when we are root (PostgreSQL refuses root)."""
        if os.geteuid() != 0:
            return None, {}
        user = pwd.getpwnam("postgres")
        assert self.root is not None
        os.chown(self.root, user.pw_uid, user.pw_gid)

        def drop() -> None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)

        return drop, {"HOME": str(self.root), "USER": "postgres", "LOGNAME": "postgres"}

    def start(self, timeout_s: float = 60) -> PostgresServer:
        # Under /tmp, not the caller's directory: the `postgres` user must be able to reach it.
        self.root = Path(tempfile.mkdtemp(prefix="dayone-pg-"))
        demote, env = self._demote()
        data = self.root / "data"
        init = subprocess.run([str(self.bindir / "initdb"), "-D", str(data), "-U", self.USER, "--auth=trust",
                               "-E", "UTF8", "--no-sync"], preexec_fn=demote,
                              env={**os.environ, **env, **stack_env()},
                              capture_output=True, text=True, timeout=120)
        if init.returncode:
            raise StackError(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
        (self.port,) = free_ports(1)
        argv = [str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off",
                "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        self.component = Component("postgres", start_group(argv, self.log, env={**env, **stack_env()},
                                                           preexec_fn=demote), self.log)

        import psycopg2

        def connects() -> bool | None:
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=self.USER, dbname="postgres",
                                 connect_timeout=2).close()
                return True
            except psycopg2.OperationalError:
                return None

        _wait("PostgreSQL accepting connections", connects, timeout_s, [self.component], interval_s=0.2)
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.USER, dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.DATABASE}")
        conn.close()
        return self

    def stop(self) -> None:
        if self.component and self.component.proc.poll() is None:
            try:  # SIGINT: PostgreSQL's fast shutdown (SIGTERM waits for every client to leave)
                os.killpg(self.component.proc.pid, signal.SIGINT)
                self.component.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            stop_group(self.component.proc.pid, grace_s=10)
        self.component = None
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


class RedisServer:
    """A private Redis on a free loopback port, nothing persisted."""

    def __init__(self, binary: str, data_dir: Path, log: Path):
        self.binary, self.data_dir, self.log = binary, data_dir, log
        self.port = 0
        self.component: Component | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 30) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.data_dir), "--daemonize", "no", "--protected-mode", "yes"]
        self.component = Component("redis", start_group(argv, self.log, env=stack_env()), self.log)
        import redis

        def pong() -> bool | None:
            try:
                return True if redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1).ping() else None
            except redis.RedisError:
                return None

        _wait("Redis answering PING", pong, timeout_s, [self.component], interval_s=0.1)
        return self

    def stop(self) -> None:
        if self.component and self.component.proc.poll() is None:
            stop_group(self.component.proc.pid, grace_s=10)
        self.component = None


# ---- the Airflow deployment -------------------------------------------------------------------------


@dataclass
class Worker:
    node: Node  # its host: name (its task instances' hostname), address, namespaces
    component: Component | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def root(self) -> Path:
        """Its own disk: HOME, working directory, AIRFLOW_HOME, DAYONE_WORKDIR, /tmp."""
        return self.node.root

    @property
    def celery_hostname(self) -> str:
        return f"{self.name}@{self.name}"

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"


@dataclass
class DistributedAirflow:
    state: Path
    worker_names: tuple[str, ...] = WORKERS
    worker_concurrency: int = 1
    api_port: int = 0
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    token: str = ""
    components: list[Component] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    s3: SeaweedS3 | None = None
    postgres: PostgresServer | None = None
    redis: RedisServer | None = None
    network: NodeNetwork | None = None
    killed: set[str] = field(default_factory=set)  # workers killed on purpose: their exit is no failure

    # -- environment --------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def _secrets(self) -> dict[str, str]:
        """What every component of one deployment shares: keys for connections in the DB, and for the
        JWTs the scheduler issues to tasks and the API server checks."""
        path = self.state / "deployment-secrets.json"
        if not path.exists():
            from cryptography.fernet import Fernet

            path.write_text(json.dumps({"fernet": Fernet.generate_key().decode(),
                                        "jwt": secrets.token_urlsafe(32), "api": secrets.token_urlsafe(32)}))
        return json.loads(path.read_text())

    def environment(self, own_root: Path) -> dict[str, str]:
        """One component's environment: the deployment's shared settings, its own disk under `own_root`."""
        assert self.postgres and self.redis and self.s3
        keys = self._secrets()
        home = own_root / "home"
        for d in (home, own_root / "airflow", own_root / "runs", own_root / "dags"):
            d.mkdir(parents=True, exist_ok=True)
        # DayOne's DAG files and the audit's planted one, linked into the component's own DAGs folder
        for dag_file in [*(REPO / "dags").glob("*.py"), HERE / "planted_dag.py"]:
            if not (own_root / "dags" / dag_file.name).is_symlink():
                (own_root / "dags" / dag_file.name).symlink_to(dag_file)
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "DAYONE_", "PYTEST_", "AWS_"))}
        plugins = str(REPO / "plugins")
        return {
            **inherited,
            **stack_env(),
            "HOME": str(home),
            "AIRFLOW_HOME": str(own_root / "airflow"),
            "DAYONE_WORKDIR": str(own_root / "runs"),
            "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
            # code, as a deployment's image carries it: DayOne's DAGs (and the audit's planted one) and plugins
            "PYTHONPATH": plugins,
            "AIRFLOW__CORE__DAGS_FOLDER": str(own_root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": plugins,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            **BUSY_MACHINE_TIMEOUTS,  # as `make ui`'s stack: two loaded cores
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",  # as docs/helm/celery.yaml: workers preload DayOne
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__FERNET_KEY": keys["fernet"],
            "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt"],
            "AIRFLOW__API__SECRET_KEY": keys["api"],
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.sqlalchemy_url,
            "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
            "AIRFLOW__CELERY__RESULT_BACKEND": self.postgres.result_backend_url,
            "AIRFLOW__CELERY__OPERATION_TIMEOUT": "30",  # sending a task on two busy cores
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.state / "passwords.json"),
            # a dead worker's task instance is failed (and retried) soon, not after five minutes
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TASK_HEARTBEAT_TIMEOUT_S),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            # the DAGs parse once: DayOne's costs seconds of CPU, and nothing changes them during a test
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3600",
            ARCHIVE_CONN_ENV: self.s3.connection_uri(),
            "DAYONE_STAGING": STAGING,
            "GX_ANALYTICS_ENABLED": "false",
        }

    # -- lifecycle ----------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None, cwd: Path) -> Component:
        log = self.state / "logs" / f"{name}.log"
        component = Component(name, start_group(argv, log, env=env, cwd=cwd), log)
        self.components.append(component)
        return component


    def _start_nodes(self, timeout_s: float) -> list[Node]:
        """The workers' hosts, the audit of their disks, and the services on their loopbacks."""
        assert self.postgres and self.redis and self.s3
        self.network = NodeNetwork(list(self.worker_names))
        nodes = self.network.create()
        audit = self._start("file-audit", [sys.executable, str(HERE / "file_audit.py"), str(self.audit_log),
                                           *(f"{n.name}={n.netns_path}={n.root}" for n in nodes)], None, self.state)
        ports = (self.postgres.port, self.redis.port, self.s3.port, self.api_port)
        forward = self._start("loopback-forward", [sys.executable, str(HERE / "loopback_forward.py"),
                                                   ",".join(str(n.netns_path) for n in nodes),
                                                   ",".join(map(str, ports))], None, self.state)
        for component in (audit, forward):
            _wait(f"{component.name} ready", lambda c=component: "ready" in c.log.read_text() or None, timeout_s,
                  [component], interval_s=0.1)
        return nodes

    def start(self, timeout_s: float = 300) -> DistributedAirflow:
        self.state.mkdir(parents=True, exist_ok=True)
        pg_bin, redis_bin = require_system_packages()
        logs = self.state / "logs"
        self.postgres = PostgresServer(pg_bin, logs / "postgres.log").start()
        self.redis = RedisServer(redis_bin, self.state / "redis", logs / "redis.log").start()
        self.s3 = SeaweedS3(self.state / "s3").start()
        lower_priority_of(self.s3.proc.pid)
        (self.api_port,) = free_ports(1)
        (self.state / "passwords.json").write_text(json.dumps({ADMIN: self.password}))
        airflow = str(Path(sys.executable).with_name("airflow"))

        control = self.state / "control-plane"
        env = self.environment(control)
        migrate = subprocess.run([airflow, "db", "migrate"], env=env, cwd=control, capture_output=True, text=True,
                                 timeout=timeout_s)
        if migrate.returncode:
            raise StackError(f"airflow db migrate failed ({migrate.returncode}):\n{migrate.stdout[-3000:]}"
                             f"{migrate.stderr[-3000:]}")
        # Each control-plane component has its own home too; none of them reads another's disk.
        for name, argv in (
            ("api-server", [airflow, "api-server", "--host", "127.0.0.1", "--port", str(self.api_port),
                            "--workers", "1"]),
            ("scheduler", [airflow, "scheduler", "--skip-serve-logs"]),
            ("dag-processor", [airflow, "dag-processor"]),
            ("triggerer", [airflow, "triggerer", "--skip-serve-logs"]),
        ):
            root = self.state / name
            self._start(name, argv, self.environment(root), root / "home")
        for node in self._start_nodes(timeout_s):
            worker = Worker(node)
            # its engines listen on its address on the bridge, where the other worker reaches them
            env = {**self.environment(worker.root), "DAYONE_ENGINE_HOST": node.address}
            worker.component = self._start(node.name, node.enter([airflow, "celery", "worker", "--celery-hostname",
                                                                  worker.celery_hostname, "--concurrency",
                                                                  str(self.worker_concurrency), "--skip-serve-logs"]),
                                           env, worker.root / "home")
            self.workers.append(worker)
        self._wait_until_serving(timeout_s)
        return self

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s

        def left() -> float:
            return max(deadline - time.monotonic(), 1.0)

        def token() -> str | None:
            answer = httpx.post(f"{self.base_url}/auth/token", json={"username": ADMIN, "password": self.password},
                                timeout=10)
            return answer.json()["access_token"] if answer.status_code in (200, 201) else None

        self.token = _wait("the API server issuing tokens", token, left(), self.components, interval_s=1)

        def healthy() -> bool | None:
            health = self.get("/api/v2/monitor/health").json()
            parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
            return True if all(health[p]["status"] == "healthy" for p in parts) else None

        _wait("scheduler, triggerer and DAG processor healthy", healthy, left(), self.components, interval_s=1)
        _wait("dayone_eval parsed", lambda: self.get("/api/v2/dags/dayone_eval").status_code == 200 or None,
              left(), self.components, interval_s=1)
        names = {w.celery_hostname for w in self.workers}
        _wait(f"Celery workers {sorted(names)} online", lambda: names <= self.celery_workers_online() or None,
              left(), self.components, interval_s=1)

    def celery_workers_online(self) -> set[str]:
        """The Celery host names that answer a ping through the broker."""
        from celery import Celery

        assert self.redis
        app = Celery(broker=self.redis.url)
        try:
            return {name for reply in app.control.ping(timeout=1.0) or [] for name in reply}
        finally:
            app.close()

    def set_consuming(self, consuming: Iterable[str]) -> None:
        """Which workers take tasks from now on, as when a node is drained (Celery's add_consumer and
        cancel_consumer on the default queue); a task already running goes on where it is."""
        from celery import Celery

        assert self.redis
        wanted = set(consuming)
        app = Celery(broker=self.redis.url)
        try:
            for worker in self.workers:
                if worker.name in self.killed:
                    continue
                control = app.control.add_consumer if worker.name in wanted else app.control.cancel_consumer
                replies = control(QUEUE, destination=[worker.celery_hostname], reply=True, timeout=10)
                if not replies:
                    raise StackError(f"{worker.name} did not answer a change of its queues")
        finally:
            app.close()

    def consume(self, worker: str, queue: str) -> None:
        """The worker takes tasks of `queue` too (a queue that a task names: `@task(queue=...)`)."""
        from celery import Celery

        assert self.redis
        app = Celery(broker=self.redis.url)
        try:
            if not app.control.add_consumer(queue, destination=[self.worker(worker).celery_hostname], reply=True,
                                            timeout=10):
                raise StackError(f"{worker} did not answer a change of its queues")
        finally:
            app.close()

    def stop(self) -> None:
        """Airflow's components all at once (SIGTERM to each group, SIGKILL after a grace period), then
        the services they use."""
        running = [c for c in self.components if c.proc.poll() is None]
        for component in running:
            try:
                os.killpg(component.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for component in running:
            stop_group(component.proc.pid, grace_s=20)
        # What tasks started in sessions of their own (a local engine whose run failed before its teardown)
        # carries a worker's environment: it goes with the stack.
        try:
            for pid in _started_within([self.state, *(w.root for w in self.workers)]):
                stop_group(pid, grace_s=10)
        finally:
            if self.network is not None:
                self.network.remove()
        for service in (self.s3, self.redis, self.postgres):
            if service is not None:
                service.stop()

    def __enter__(self) -> DistributedAirflow:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test does with it -----------------------------------------------------------------

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", params=params, timeout=30,
                         headers={"Authorization": f"Bearer {self.token}"})

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Trigger a run through the REST API, as a user's client would; its run id."""
        answer = httpx.post(f"{self.base_url}/api/v2/dags/{dag_id}/dagRuns", timeout=30,
                            headers={"Authorization": f"Bearer {self.token}"},
                            json={"logical_date": None, "conf": conf})
        if answer.status_code not in (200, 201):
            raise StackError(f"triggering {dag_id} answered {answer.status_code}: {answer.text[:2000]}")
        return answer.json()["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]

    def wait_for_run(self, dag_id: str, run_id: str, while_waiting: Callable[[], None] | None = None) -> str:
        """The run's final state (success or failed); `while_waiting` is called at each poll. StackError when
        a component dies or the run stops moving (run_progress.py)."""
        def final_state() -> str | None:
            for component in self.components:
                if component.name not in self.killed and component.proc.poll() is not None:
                    raise StackError(f"{component.name} exited with {component.proc.returncode} during run "
                                     f"{run_id}; its log ends:\n{_tail(component.log)}")
            if while_waiting:
                while_waiting()
            try:
                state = self.run_state(dag_id, run_id)
            except (httpx.HTTPError, OSError, ValueError, KeyError):  # as _wait: an unanswered poll
                return None
            return state if state in ("success", "failed") else None

        def tasks_ended() -> int | None:
            try:
                return ended_tasks(self.task_instances(dag_id, run_id))
            except (httpx.HTTPError, OSError, ValueError, KeyError):  # as _wait: an unanswered poll
                return None

        try:
            return wait_while_moving(f"run {run_id}", final_state, tasks_ended, interval_s=2)
        except RunStalled as exc:
            raise StackError(f"{exc}\n{_tails(self.components)}") from None

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=1000).json()["task_instances"]

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[dict[str, Any]]:
        """Every try of a task instance, the current one included, oldest first."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/tries"
        return sorted(self.get(path).json()["task_instances"], key=lambda t: t["try_number"])

    # -- the file audit ---------------------------------------------------------------------------

    @property
    def audit_log(self) -> Path:
        return self.state / "file-audit.jsonl"

    def cross_node_reads(self, since: int = 0) -> list[dict[str, Any]]:
        """Every open by one worker of a file on another worker's disk, from the audit's `since`-th on."""
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines()[since:] if line.strip()]

    def audit_mark(self) -> int:
        return len(self.cross_node_reads())

    def assert_no_cross_node_reads(self, since: int = 0) -> None:
        """CrossNodeRead when any worker opened a file another worker wrote (since the mark `since`)."""
        found = self.cross_node_reads(since)
        if found:
            lines = [f"{f['reader']} opened a file {f['writer']} wrote: {f['path']} (pid {f['pid']}: {f['command'][:160]})"
                     for f in found[:20]]
            raise CrossNodeRead(f"{len(found)} open(s) of another worker's files; a worker hands another nothing "
                                "but through S3:\n" + "\n".join(lines))

    # -- failures -----------------------------------------------------------------------------------

    def log_tail(self, component: Component, lines: int = LOG_TAIL_LINES) -> str:
        return _tail(component.log, lines)

    def worker(self, name: str) -> Worker:
        return next(w for w in self.workers if w.name == name)

    def kill_worker(self, name: str) -> list[int]:
        """kill -9 of everything the worker runs, as when its host dies: its session (Celery, its pool, the
        supervisors and the task processes, which Airflow puts in process groups of their own). An engine a
        task started is in a session of its own, as it would be in a pod of its own, and lives on."""
        worker = self.worker(name)
        assert worker.component
        session = worker.component.proc.pid
        killed = _session_members(session)
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.component.proc.wait(timeout=30)
        poll(lambda: True if not any(alive(p) for p in killed) else None, timeout_s=30, interval_s=0.1)
        self.killed.add(name)
        return killed

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """A try's log, from the disk of whichever worker ran it (workers serve no logs here)."""
        parts = f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}"
        name = (f"map_index={map_index}/" if map_index >= 0 else "") + f"attempt={try_number}.log"
        for worker in self.workers:
            path = worker.airflow_home / "logs" / parts / name
            if path.exists():
                return f"[{worker.name}] " + path.read_text(errors="replace")[-6000:]
        return f"(no log of {task_id} try {try_number} on any worker)"

    def failure_report(self, dag_id: str, run_id: str) -> str:
        """The failed task instances of a run, each with its log's tail, and the components' log tails."""
        lines = []
        for ti in self.task_instances(dag_id, run_id):
            if ti["state"] in ("failed", "upstream_failed"):
                lines.append(f"== {ti['task_id']}[{ti['map_index']}] {ti['state']} on {ti.get('hostname')}")
                if ti["state"] == "failed":
                    lines.append(self.task_log(dag_id, run_id, ti["task_id"], ti["try_number"], ti["map_index"]))
        # a try whose start the API never confirmed leaves no task log: the scheduler's event names it
        for event in self.get("/api/v2/eventLogs", dag_id=dag_id, run_id=run_id, event="state mismatch").json().get(
                "event_logs", []):
            lines.append(f"== scheduler: {event.get('task_id')}: {event.get('extra')}")
        for component in self.components:
            lines.append(f"--- {component.name} log tail\n{_tail(component.log, 15)}")
        return "\n".join(lines)


def _session_members(session: int) -> list[int]:
    """Every process in the session `session` (field 6 of /proc/PID/stat)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def _started_within(roots: list[Path]) -> list[int]:
    """Session leaders whose environment puts their AIRFLOW_HOME under one of `roots`: started by this stack."""
    markers = tuple(f"AIRFLOW_HOME={root}/".encode() for root in roots)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        session = int(stat[stat.rindex(")") + 2:].split()[3])
        if session == int(entry.name) and any(v.startswith(markers) for v in environ):
            found.append(session)
    return found
