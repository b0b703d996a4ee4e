"""DayOne's Airflow plugin for reports: a "DayOne report" link on every task of a DayOne run, and
the small app on Airflow's API server (/dayone/reports/...) that serves the report. See links.py.

Nothing else imports this module: Airflow's plugin loader finds the class here, once.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from dayone_airflow.links import URL_PREFIX, DayOneReportLink, LazyReportApp


class DayOneReportPlugin(AirflowPlugin):
    name = "dayone_report"
    global_operator_extra_links = [DayOneReportLink()]
    fastapi_apps = [{"app": LazyReportApp(), "url_prefix": URL_PREFIX, "name": "DayOne reports"}]
