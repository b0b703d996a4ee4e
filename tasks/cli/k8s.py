"""`dayone render --config RUN.yaml --out DIR`: write every Kubernetes object a run would apply.

Nothing is deployed. Tags are pinned through the registry first (read-only), unless every
engine already names a digest; `--offline` refuses to touch the network. Every object is checked
against the official Kubernetes schema before it is written.

`dayone render --runner-pod-template IMAGE --out DIR` writes the KubernetesExecutor pod template
of the runner image instead (no run config needed). With a run config it also writes rbac.yaml: the Roles
a run of it needs (tasks/k8s/rbac.py), the worker's reading the Secrets the config names.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from tasks.config import RunConfig, parse_run_config, read_config_file
from tasks.k8s.images import pinned_from_config
from tasks.k8s.manifests import ManifestError, render_engine, runner_pod_template, validate_objects

RUNNER_POD_TEMPLATE_FILE = "runner-pod-template.yaml"
RBAC_FILE = "rbac.yaml"


def render_run(
    config: RunConfig,
    pinned: dict[str, dict[str, Any]],
    created_at: dt.datetime | None = None,
    kube_version: str | None = None,
    validate: bool = True,
) -> dict[str, list[dict[str, Any]]]:
    """engine name -> its objects, each validated against the Kubernetes schema."""
    out = {}
    for engine in config.engines:
        objects = render_engine(config, engine, pinned[engine.name], created_at)
        if validate:
            validate_objects(objects, kube_version)
        out[engine.name] = objects
    return out


def write_manifests(rendered: dict[str, list[dict[str, Any]]], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for engine, objects in rendered.items():
        p = out_dir / f"{engine}.yaml"
        p.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
        paths.append(p)
    return paths


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("render", help="write the Kubernetes objects of a run, or the runner pod template (deploys nothing)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", type=Path, help="run config, YAML or JSON")
    what.add_argument("--runner-pod-template", metavar="IMAGE",
                      help=f"write {RUNNER_POD_TEMPLATE_FILE}, the KubernetesExecutor pod template of this runner image")
    p.add_argument("--out", required=True, type=Path, help="directory for <engine>.yaml (or the pod template)")
    p.add_argument("--run-id", default=None, help="run id for names and labels (default: the config's, else 'dry-run')")
    p.add_argument("--offline", action="store_true", help="never contact a registry: every engine must name a digest")
    p.add_argument("--kube-version", default=None, help="schema version to validate against (default: newest known)")
    p.add_argument("--no-validate", action="store_true", help="skip the schema check (kubernetes-validate)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.runner_pod_template:
        return write_runner_pod_template(args)
    from tasks.k8s.images import RegistryError, credentials_from_env, resolve

    data = read_config_file(str(args.config))
    if args.run_id or not data.get("run_id"):
        data["run_id"] = args.run_id or "dry-run"
    data["target"] = "kubernetes"
    config = parse_run_config(data)
    pinned: dict[str, dict[str, Any]] = {}
    try:
        for engine in config.engines:
            from_config = pinned_from_config(engine)
            if from_config:
                pinned[engine.name] = from_config
            elif args.offline:
                raise ManifestError(
                    f"engines[{engine.name}].image: {engine.image} has no digest and --offline forbids pinning. "
                    "Fix: set engines[].digest or drop --offline"
                )
            else:
                pinned[engine.name] = resolve(engine.image, credentials_from_env()).as_dict()
        rendered = render_run(config, pinned, kube_version=args.kube_version, validate=not args.no_validate)
    except (ManifestError, RegistryError) as exc:
        print(f"dayone render: {exc}", file=sys.stderr)
        return 1
    for p in write_manifests(rendered, args.out):
        print(p)
    from tasks.k8s.rbac import roles_for

    (args.out / RBAC_FILE).write_text(yaml.safe_dump_all(roles_for(config), sort_keys=False), encoding="utf-8")
    print(args.out / RBAC_FILE)
    (args.out / "pinned.json").write_text(json.dumps(pinned, indent=2, sort_keys=True), encoding="utf-8")
    return 0


def write_runner_pod_template(args: argparse.Namespace) -> int:
    template = runner_pod_template(args.runner_pod_template)
    if not args.no_validate:
        try:
            validate_objects([template], args.kube_version)
        except ManifestError as exc:
            print(f"dayone render: {exc}", file=sys.stderr)
            return 1
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / RUNNER_POD_TEMPLATE_FILE
    path.write_text(yaml.safe_dump(template, sort_keys=False), encoding="utf-8")
    print(path)
    return 0
