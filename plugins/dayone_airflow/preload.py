"""DayOne's DAG modules, imported once by each long-lived Airflow process that loads plugins (the scheduler,
the DAG processor, the triggerer; Celery workers under [core] lazy_load_plugins = False).

Airflow forks a process for each task and each DAG parse from those, and every one of them imports what the
DAG file imports: the Kubernetes client (through KubernetesPodOperator) and the config models, some 3 s of
CPU each. Imported here, a forked process starts with them. The trigger form's schema and the presets'
files, which every parse reads and nothing changes while Airflow runs, are read here once too. The class
is empty. Code changed under a running Airflow reaches its tasks after a restart, as with any preloaded
worker.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

import dayone_airflow.kubernetes  # noqa: F401
import dayone_airflow.params  # noqa: F401
import dayone_airflow.pipeline  # noqa: F401
import dayone_airflow.step_pods  # noqa: F401
import dayone_airflow.turns  # noqa: F401
from tasks.config.presets import PRESETS, preset_config

dayone_airflow.params.form_schema()
for _name in PRESETS:
    preset_config(_name)


class DayOnePreloadPlugin(AirflowPlugin):
    name = "dayone_preload"
