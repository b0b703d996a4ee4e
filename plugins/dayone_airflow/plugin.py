"""DayOne's Airflow plugin for reports: a "DayOne report" link on every task of a DayOne run, a
"DayOne report" tab on the DAG run page, and the small app on Airflow's API server
(/dayone/reports/...) that serves the report to both. See links.py.

The tab is an external view with destination "dag_run" (Airflow 3.1+): the UI shows it on every DAG
run page, fills {DAG_ID} and {RUN_ID} in its href and frames the page in a sandboxed iframe; the
report's own Content-Security-Policy allows no script, which it does not need. On a run of another DAG the tab says it is not a DayOne DAG.

Nothing else imports this module: Airflow's plugin loader finds the class here, once.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from dayone_airflow.links import REPORT_LINK_NAME, RUN_PAGE_PATH, URL_PREFIX, DayOneReportLink, LazyReportApp, api_url


class DayOneReportPlugin(AirflowPlugin):
    name = "dayone_report"
    global_operator_extra_links = [DayOneReportLink()]
    fastapi_apps = [{"app": LazyReportApp(), "url_prefix": URL_PREFIX, "name": "DayOne reports"}]
    external_views = [{"name": REPORT_LINK_NAME, "href": api_url(RUN_PAGE_PATH), "destination": "dag_run",
                       "url_route": "dayone_report"}]
