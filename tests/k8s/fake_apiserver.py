"""A local HTTP server speaking the slice of the Kubernetes REST API that DayOne uses.

It stores objects in memory like the API server does (uid, creationTimestamp, generation,
resourceVersion; 404/409 as Status objects; label and field selectors), and it plays the
controllers and the kubelet on the test's command: start a Deployment's pod, set its container
state (ImagePullBackOff, CrashLoopBackOff, restarts), post events and logs, mark the rollout
available. Deleting a Deployment removes the pods it owns, as the garbage collector would. Watchers
(fake_kubelet.py, fake_deployments.py) hear of each pod and Deployment created or deleted; a pod's log can
be followed while it grows, and read with each line's time (timestamps) or only its last seconds
(sinceSeconds), as the kubelet serves it.

Clients authenticate with a bearer token, as a kubeconfig user would (the worker's, or the runner
pods' service account's); anything else gets 401. Each request is then authorized as the API server's
RBAC authorizer does it: its verb, API group, resource (and subresource), namespace and name against the
rules of the Roles and ClusterRoles bound to its user; one no rule allows gets 403 Forbidden with the
API server's Status. By default DayOne's own Roles (tasks/k8s/rbac.py) are bound in namespace `bench`:
the worker's and the node ClusterRole to the worker, the runner's to the runner pods (grant() binds those of
another namespace or config). Each request is recorded with its user and the code it got. Objects named by
generateName get a generated name; deleting an object deletes what names it its owner (the garbage
collector), a Deployment's pods and a Service's Secret alike.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tasks.k8s.rbac import roles

TOKEN = "dayone-test-token"
RUNNER_TOKEN = "dayone-runner-test-token"  # the runner pods' service account (tests/k8s/fake_kubelet.py)
USERS = {TOKEN: "worker", RUNNER_TOKEN: "runner"}
_CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|services|events|secrets)(?:/(?P<name>[^/]+)(?:/(?P<sub>log|status))?)?$")
_APPS = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<res>deployments)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$")
_NODES = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")
KINDS = {"pods": ("v1", "Pod"), "services": ("v1", "Service"), "events": ("v1", "Event"), "secrets": ("v1", "Secret"), "deployments": ("apps/v1", "Deployment")}


def rfc3339(t: dt.datetime | None = None) -> str:
    return (t or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches_labels(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        obj = (obj or {}).get(part)
    return obj


def _matches_fields(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        k, v = term.split("=", 1)
        if str(_field(obj, k)) != v:
            return False
    return True


# ---- authorization, as the API server's RBAC authorizer does it ----------------------------------------
_RESOURCE_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
                            r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")


def request_attributes(method: str, path: str, query: dict[str, str]) -> dict[str, str] | None:
    """A resource request's verb, apiGroup, resource (with its subresource), namespace and name, as RBAC
    names them; None for a path that names no resource."""
    m = _RESOURCE_PATH.match(path)
    if not m:
        return None
    name = m.group("name") or ""
    if method == "GET":
        verb = "watch" if query.get("watch") in ("1", "true") else "get" if name else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())
    if verb in ("list", "watch") and not name:  # a list limited to one name is authorized by that name
        field = dict(t.split("=", 1) for t in (query.get("fieldSelector") or "").split(",") if "=" in t)
        name = field.get("metadata.name", "")
    resource = m.group("res") + (f"/{m.group('sub')}" if m.group("sub") else "")
    return {"verb": verb, "group": m.group("group") or "", "resource": resource, "namespace": m.group("ns") or "",
            "name": name}


def _allows(rule: dict[str, Any], a: dict[str, str]) -> bool:
    names = rule.get("resourceNames") or []
    return (any(g in ("*", a["group"]) for g in rule.get("apiGroups") or [])
            and any(r in ("*", a["resource"]) for r in rule.get("resources") or [])
            and any(v in ("*", a["verb"]) for v in rule.get("verbs") or [])
            and (not names or a["name"] in names))  # a create has no name yet: never allowed by a named rule


def forbidden_message(user: str, a: dict[str, str]) -> str:
    what = a["resource"].split("/")[0] + (f' "{a["name"]}"' if a["name"] else "")
    where = f'in the namespace "{a["namespace"]}"' if a["namespace"] else "at the cluster scope"
    return (f'{what} is forbidden: User "{user}" cannot {a["verb"]} resource "{a["resource"]}" in API group '
            f'"{a["group"]}" {where}')


class Rbac:
    """Roles, ClusterRoles and their bindings to users, and the one question: is this request allowed."""

    def __init__(self) -> None:
        self.roles: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (namespace or "", name) -> rules
        self.bindings: list[tuple[str, str, str, str]] = []  # (user, role kind, role name, namespace or "")

    def apply(self, objects: Iterable[dict[str, Any]]) -> None:
        for o in objects:
            meta, kind = o["metadata"], o["kind"]
            if kind in ("Role", "ClusterRole"):
                self.roles[(meta.get("namespace", "") if kind == "Role" else "", meta["name"])] = o["rules"]
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                ns = meta.get("namespace", "") if kind == "RoleBinding" else ""
                for subject in o["subjects"]:
                    binding = (subject["name"], o["roleRef"]["kind"], o["roleRef"]["name"], ns)
                    if binding not in self.bindings:
                        self.bindings.append(binding)
            else:
                raise ValueError(f"not an RBAC object: {kind}")

    def allowed(self, user: str, a: dict[str, str]) -> bool:
        for who, kind, name, bound_in in self.bindings:
            if who != user or (bound_in and bound_in != a["namespace"]):
                continue  # a RoleBinding grants in its namespace only, a ClusterRoleBinding everywhere
            rules = self.roles.get((bound_in if kind == "Role" else "", name)) or []
            if any(_allows(rule, a) for rule in rules):
                return True
        return False


def dayone_bindings(namespace: str) -> list[dict[str, Any]]:
    """DayOne's Roles bound as docs/deploy.md says: the worker's and the node reader to the worker, the
    runner's to the runner pods' service account."""
    def binding(kind: str, name: str, user: str, role_kind: str) -> dict[str, Any]:
        meta = {"name": name, **({"namespace": namespace} if kind == "RoleBinding" else {})}
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
                "subjects": [{"kind": "User", "name": user}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}}

    return [binding("RoleBinding", "dayone-worker", "worker", "Role"),
            binding("ClusterRoleBinding", "dayone-worker-nodes", "worker", "ClusterRole"),
            binding("RoleBinding", "dayone-runner", "runner", "Role")]


def _timed_log(lines: list[tuple[float, str]], query: dict[str, str]) -> str:
    """The lines written in the last sinceSeconds, each after its RFC3339Nano time with timestamps=true."""
    since = time.time() - float(query["sinceSeconds"]) if "sinceSeconds" in query else 0.0
    stamp = query.get("timestamps") in ("true", "True")
    return "".join((dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") if stamp
                    else "") + line for t, line in list(lines) if t >= since)


class FakeApiServer:
    def __init__(self, namespace: str = "bench") -> None:
        self.rbac = Rbac()
        self.grant(roles(namespace))
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (resource, namespace, name)
        self.logs: dict[tuple[str, str, str, bool], str] = {}  # (namespace, pod, container, previous)
        # the same key: each line with when it was written (a kubelet's), for timestamps and sinceSeconds
        self.log_lines: dict[tuple[str, str, str, bool], list[tuple[float, str]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.on_request: list[Any] = []  # called with each request as recorded, before it is answered
        self.watchers: list[Any] = []  # called (event, resource, object) on pod and Deployment create and delete
        self.finished_logs: set[tuple[str, str]] = set()  # (namespace, pod) whose log will not grow
        self.lock = threading.Lock()
        self._rv = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def grant(self, objects: list[dict[str, Any]]) -> None:
        """DayOne's Roles as rendered (tasks/k8s/rbac.py `roles`, `roles_for`), bound in their namespace as
        docs/deploy.md says; a Role of the same name is replaced (a config naming other Secrets)."""
        namespaces = {o["metadata"]["namespace"] for o in objects if o["kind"] == "Role"}
        self.rbac.apply(objects)
        for ns in sorted(namespaces):
            self.rbac.apply(dayone_bindings(ns))

    def forbidden(self) -> list[dict[str, Any]]:
        """The requests refused for want of a grant."""
        return [r for r in self.requests if r.get("code") == 403]

    def kubeconfig(self, token: str = TOKEN) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "dayone", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "dayone", "namespace": "default"}}],
            "current-context": "fake",
        }

    # ---- what the tests read ---------------------------------------------------------------
    def list(self, resource: str, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (res, ns, _), o in sorted(self.objects.items())
                if res == resource and (namespace is None or ns == namespace)
                and _matches_labels(o["metadata"].get("labels") or {}, selector)
            ]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.objects.get((resource, namespace, name)))

    def created(self) -> list[dict[str, Any]]:
        """Bodies of the create calls, in order: exactly what the client sent."""
        return [r["body"] for r in self.requests if r["method"] == "POST"]

    # ---- controllers and kubelet, on the test's command ---------------------------------------
    def _store(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339())
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(resource, meta["namespace"], meta["name"])] = obj
        return obj

    def start_pod(self, namespace: str, deployment: str, *, waiting: tuple[str, str] | None = None,
                  running: bool = False, ready: bool = False, restart_count: int = 0,
                  last_terminated: dict[str, Any] | None = None, unschedulable_since: dt.datetime | None = None,
                  node: str | None = None) -> str:
        """Create the pod the Deployment's ReplicaSet would make, in the given state (scheduled on `node`)."""
        with self.lock:
            dep = self.objects[("deployments", namespace, deployment)]
            template = copy.deepcopy(dep["spec"]["template"])
            if node is not None:
                template["spec"]["nodeName"] = node
            name = f"{deployment}-{uuid.uuid4().hex[:10]}-{uuid.uuid4().hex[:5]}"
            container = template["spec"]["containers"][0]
            if unschedulable_since is not None:
                status = {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                                    "lastTransitionTime": rfc3339(unschedulable_since)}],
                }
            else:
                if waiting:
                    state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
                elif running:
                    state = {"running": {"startedAt": rfc3339()}}
                else:
                    state = {"waiting": {"reason": "ContainerCreating"}}
                cs = {"name": container["name"], "image": container["image"], "imageID": "", "ready": ready,
                      "restartCount": restart_count, "started": running, "state": state}
                if last_terminated:
                    cs["lastState"] = {"terminated": last_terminated}
                status = {
                    "phase": "Running" if running else "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339()}],
                    "containerStatuses": [cs],
                }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": template["metadata"]["labels"],
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment,
                                         "uid": dep["metadata"]["uid"], "controller": True}],
                },
                "spec": template["spec"],
                "status": status,
            }
            self._store("pods", pod)
            return name

    def add_node(self, name: str, labels: dict[str, str]) -> None:
        """A cluster node with these labels (GPU feature discovery's, for instance)."""
        with self.lock:
            self.objects[("nodes", "", name)] = {"apiVersion": "v1", "kind": "Node",
                                                  "metadata": {"name": name, "labels": dict(labels)}}

    def set_container_state(self, namespace: str, pod: str, **fields: Any) -> None:
        with self.lock:
            cs = self.objects[("pods", namespace, pod)]["status"]["containerStatuses"][0]
            cs.update(fields)

    def set_available(self, namespace: str, deployment: str) -> None:
        with self.lock:
            dep = self.objects[("deployments", namespace, deployment)]
            dep["status"] = {
                "observedGeneration": dep["metadata"]["generation"],
                "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                ],
            }

    def add_event(self, namespace: str, pod: str, reason: str, message: str, type_: str = "Warning", count: int = 1) -> None:
        with self.lock:
            name = f"{pod}.{uuid.uuid4().hex[:12]}"
            self._store("events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace, "apiVersion": "v1"},
                "reason": reason, "message": message, "type": type_, "count": count,
                "firstTimestamp": rfc3339(), "lastTimestamp": rfc3339(),
                "source": {"component": "kubelet"},
            })

    def set_log(self, namespace: str, pod: str, text: str, container: str = "engine", previous: bool = False) -> None:
        self.logs[(namespace, pod, container, previous)] = text

    def _tell(self, event: str, resource: str, obj: dict[str, Any]) -> None:
        for watcher in self.watchers:
            watcher(event, resource, copy.deepcopy(obj))

    # ---- the HTTP side ----------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, doc: Any, content_type: str = "application/json") -> None:
                self._record["code"] = code
                body = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _status(self, code: int, reason: str, message: str,
                        details: dict[str, str] | None = None) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, **({"details": details} if details else {}),
                                  "code": code})

            def _handle(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                self._body = body
                user = USERS.get((self.headers.get("Authorization") or "").removeprefix("Bearer "))
                self._record = {"method": self.command, "path": url.path, "query": query,
                                "body": copy.deepcopy(body), "user": user}
                server.requests.append(self._record)
                for hook in list(server.on_request):
                    hook(self._record)
                if user is None:
                    return self._status(401, "Unauthorized", "Unauthorized")
                attributes = request_attributes(self.command, url.path, query)
                if attributes is not None and not server.rbac.allowed(user, attributes):
                    return self._status(403, "Forbidden", forbidden_message(user, attributes),
                                        {"name": attributes["name"], "kind": attributes["resource"].split("/")[0]})
                node = _NODES.match(url.path)
                if node and self.command == "GET":
                    with server.lock:
                        obj = server.objects.get(("nodes", "", node.group("name")))
                    if obj is None:
                        return self._status(404, "NotFound", f'nodes "{node.group("name")}" not found')
                    return self._send(200, obj)
                m = _CORE.match(url.path) or _APPS.match(url.path)
                if not m:
                    return self._status(404, "NotFound", f"the server could not find the requested resource ({url.path})")
                ns, res, name, sub = m.group("ns"), m.group("res"), m.group("name"), m.group("sub")
                if sub == "log" and query.get("follow") in ("1", "t", "true", "True") and \
                        (ns, name) not in server.finished_logs and server.get(res, ns, name) is not None:
                    return self._follow_log(ns, name, query)  # outside the lock: it streams until the pod ends
                with server.lock:
                    if name is None:
                        return self._collection(ns, res, query, body)
                    return self._item(ns, res, name, sub, query)

            def _follow_log(self, ns: str, name: str, query: dict[str, str]) -> None:
                """The container's log as it grows (chunked), ending when the pod's process ends."""
                pod = server.get("pods", ns, name) or {}
                container = query.get("container") or pod["spec"]["containers"][0]["name"]
                self._record["code"] = 200
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                while True:
                    done = (ns, name) in server.finished_logs or server.get("pods", ns, name) is None
                    text = server.logs.get((ns, name, container, False), "").encode()
                    if len(text) > sent:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(text) - sent, text[sent:]))
                        self.wfile.flush()
                        sent = len(text)
                    if done:
                        break
                    time.sleep(0.05)
                self.wfile.write(b"0\r\n\r\n")

            def _collection(self, ns: str, res: str, query: dict[str, str], body: Any) -> None:
                api_version, kind = KINDS[res]
                if self.command == "GET":
                    items = [
                        o for (r, n, _), o in sorted(server.objects.items())
                        if r == res and n == ns
                        and _matches_labels(o["metadata"].get("labels") or {}, query.get("labelSelector"))
                        and _matches_fields(o, query.get("fieldSelector"))
                    ]
                    return self._send(200, {"kind": f"{kind}List", "apiVersion": api_version,
                                            "metadata": {"resourceVersion": str(next(server._rv))}, "items": items})
                if self.command == "POST":
                    meta = body.setdefault("metadata", {})
                    if meta.get("namespace", ns) != ns:
                        return self._status(400, "BadRequest", "the namespace of the object does not match the request")
                    meta["namespace"] = ns
                    if not meta.get("name") and meta.get("generateName"):  # the name made as the API server does
                        meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                    if (res, ns, meta.get("name")) in server.objects:
                        return self._status(409, "AlreadyExists", f'{res} "{meta["name"]}" already exists')
                    if res == "deployments":
                        meta["generation"] = 1
                        body["status"] = {}
                    if res == "services":
                        body["spec"]["clusterIP"] = "10.96.0.10"
                    stored = server._store(res, body)
                    if res in ("pods", "deployments"):
                        server._tell("created", res, stored)
                    return self._send(201, stored)
                return self._status(405, "MethodNotAllowed", self.command)

            def _item(self, ns: str, res: str, name: str, sub: str | None, query: dict[str, str]) -> None:
                key = (res, ns, name)
                obj = server.objects.get(key)
                if obj is None:
                    return self._status(404, "NotFound", f'{res} "{name}" not found')
                if sub == "log":
                    container = query.get("container") or obj["spec"]["containers"][0]["name"]
                    previous = query.get("previous") in ("1", "t", "T", "true", "True", "TRUE")  # Go strconv.ParseBool
                    text = server.logs.get((ns, name, container, previous))
                    lines = server.log_lines.get((ns, name, container, previous))
                    if lines is not None and (query.get("timestamps") in ("true", "True") or "sinceSeconds" in query):
                        text = _timed_log(lines, query)
                    if text is None:
                        what = "previous terminated container" if previous else "container"
                        return self._status(400, "BadRequest", f'{what} "{container}" in pod "{name}" not found')
                    return self._send(200, text, "text/plain")
                if self.command == "GET":
                    return self._send(200, obj)
                if self.command == "PATCH":  # a merge patch of the labels and annotations, as KPO sends
                    patch = self._patch_body()
                    for field in ("labels", "annotations"):
                        merged = {**(obj["metadata"].get(field) or {}), **((patch.get("metadata") or {}).get(field) or {})}
                        obj["metadata"][field] = {k: v for k, v in merged.items() if v is not None}
                    obj["metadata"]["resourceVersion"] = str(next(server._rv))
                    return self._send(200, obj)
                if self.command == "DELETE":
                    del server.objects[key]
                    if res in ("pods", "deployments"):
                        server._tell("deleted", res, obj)
                    owners = [obj["metadata"]["uid"]]
                    while owners:  # the garbage collector removes what the object owned, and what that owned
                        uid = owners.pop()
                        for k, o in list(server.objects.items()):
                            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or []):
                                del server.objects[k]
                                owners.append(o["metadata"].get("uid"))
                    return self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                            "details": {"name": name, "kind": res, "uid": obj["metadata"]["uid"]}})
                return self._status(405, "MethodNotAllowed", self.command)

            def _patch_body(self) -> dict[str, Any]:
                return self._body or {}

            do_GET = do_POST = do_DELETE = do_PATCH = _handle

        return Handler
