"""DAG parse and serialization cost per DAG file, as the DAG processor pays it.

Each DAG file is parsed (DagBag on that one file) and serialized (DagSerialization.to_dict, what
the DAG processor writes to the metadata DB) in a fresh process, so import caching does not favour
a later file. Figures: CPU seconds (process time, so a busy machine inflates them less than wall
time), serialized size, tasks, and how many times Param.resolve ran. A reference DAG with one task
and no params is measured the same way in the same run; its ratio is the figure to compare across
machines. Targets (issue 17): at most 2 s of CPU per file and 300 KB serialized.

Each file is measured twice: in a bare process, and after Airflow has loaded the plugins (as the scheduler,
DAG processor and triggerer have before they fork a task or a parse): DayOne's preload plugin
(plugins/dayone_airflow/preload.py) leaves a forked process nothing of DayOne's to import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import airflow  # Airflow's own import is the same for every DAG file: not counted
if sys.argv[2] == "after-plugins":
    from airflow import plugins_manager
    plugins_manager.ensure_plugins_loaded()
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import Param
from airflow.serialization.serialized_objects import DagSerialization
calls = [0]
resolve = Param.resolve
def counted(self, *a, **k):
    calls[0] += 1
    return resolve(self, *a, **k)
Param.resolve = counted
t0 = time.process_time()
bag = DagBag(dag_folder=sys.argv[1], include_examples=False) if "include_examples" in DagBag.__init__.__code__.co_varnames else DagBag(dag_folder=sys.argv[1])
t1 = time.process_time()
out = {}
for dag_id, dag in bag.dags.items():
    s0 = time.process_time()
    blob = json.dumps(DagSerialization.to_dict(dag))
    out[dag_id] = {"serialize_cpu_s": time.process_time() - s0, "kb": len(blob) / 1024, "tasks": len(dag.tasks)}
print(json.dumps({"parse_cpu_s": t1 - t0, "dags": out, "errors": {k: str(v)[:300] for k, v in bag.import_errors.items()},
                  "param_resolve_calls": calls[0]}))
"""

REFERENCE_DAG = '''
import pendulum
from airflow.sdk import dag, task

@dag(dag_id="reference_one_task", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def reference():
    @task
    def one():
        return 1
    one()

reference()
'''


def measure(path: Path, when: str = "bare") -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'plugins'}:{REPO}", "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins")}
    out = subprocess.run([sys.executable, "-c", PROBE, str(path), when], capture_output=True, text=True, env=env,
                         timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("AIRFLOW_HOME", tmp)
        ref_file = Path(tmp) / "reference_dag.py"
        ref_file.write_text(REFERENCE_DAG, encoding="utf-8")
        reference = measure(ref_file)
        ref_cpu = reference["parse_cpu_s"] + sum(d["serialize_cpu_s"] for d in reference["dags"].values())
        print(f"reference (one task, no params): {ref_cpu:.2f} s CPU")
        worst = 0.0
        for path in sorted((REPO / "dags").glob("*.py")):
            m = measure(path)
            if m["errors"]:
                print(f"{path.name}: import errors {m['errors']}")
                return 1
            for dag_id, d in m["dags"].items():
                cpu = m["parse_cpu_s"] + d["serialize_cpu_s"]
                worst = max(worst, cpu)
                print(f"{path.name} ({dag_id}): parse {m['parse_cpu_s']:.2f} s + serialize {d['serialize_cpu_s']:.2f} s "
                      f"CPU = {cpu:.2f} s ({cpu / ref_cpu:.1f}x reference), {d['kb']:.0f} KB serialized, "
                      f"{d['tasks']} tasks, Param.resolve x{m['param_resolve_calls']}")
            forked = measure(path, "after-plugins")
            print(f"{path.name}: parse after the plugins loaded (a forked task or parse) {forked['parse_cpu_s']:.2f} s "
                  f"CPU against {m['parse_cpu_s']:.2f} s bare ({forked['parse_cpu_s'] / m['parse_cpu_s']:.2f}x)")
        print(f"worst: {worst:.2f} s CPU per DAG file (target <= 2 s); sizes above (target <= 300 KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
