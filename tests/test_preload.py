"""Airflow forks each task process and each DAG parse from a process that loaded plugins: DayOne's preload
plugin (plugins/dayone_airflow/preload.py) leaves them nothing of DayOne's, the Kubernetes client or the
provider's operators to import when they parse a DayOne DAG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WATCHED = ("dayone_airflow", "tasks", "kubernetes", "kubernetes_asyncio", "airflow.providers.cncf")

PARSE_AFTER_PLUGINS = """
import json, sys
from airflow import plugins_manager
plugins_manager.ensure_plugins_loaded()
loaded = set(sys.modules)
read = {}
if "dayone_airflow.params" in sys.modules:  # what the preload read: the form's schema, each preset's file
    from dayone_airflow.params import form_schema
    from tasks.config.presets import PRESETS, _preset_config
    read = {"schema": form_schema.cache_info().currsize, "presets": _preset_config.cache_info().currsize,
            "preset_count": len(PRESETS)}
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
new = sorted(m for m in set(sys.modules) - loaded if m.split(".")[0] in {w.split(".")[0] for w in sys.argv[2:]})
print(json.dumps({"dags": sorted(bag.dags), "errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "plugins": sorted(p.name for p in plugins_manager._get_plugins()[0]), "new": new, "read": read}))
"""


def test_parsing_the_dags_after_plugins_load_imports_nothing_heavy(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=os.pathsep.join([str(REPO / "plugins"), str(REPO)]))
    out = subprocess.run([sys.executable, "-c", PARSE_AFTER_PLUGINS, str(REPO / "dags"), *WATCHED], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["dags"] == ["dayone_eval", "dayone_nightly"] and not result["errors"], result
    assert "dayone_preload" in result["plugins"], result["plugins"]
    new = [m for m in result["new"] if m.startswith(WATCHED)]
    assert not new, f"a DAG parse still imports these (add them to preload.py): {new}"
    read = result["read"]
    assert read["schema"] == 1 and read["presets"] == read["preset_count"], read
