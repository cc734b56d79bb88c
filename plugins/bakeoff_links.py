"""The DAG run's way to its report, through Airflow's own mechanism: an operator extra link on `publish`.

When `publish` finishes, the task runner asks each of its extra links for a URL and stores it as an
XCom; the Airflow UI shows it as a button on the task ("Report"). The URL is the plugin's route for
the published HTML report (bakeoff_ui: /bakeoff/reports/<plan folder>/<run folder>/<file>), built from
what `publish` returned, under the API server's base URL when one is configured.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

URL_PREFIX = "/bakeoff"  # where bakeoff_ui mounts its app


def report_url(published: Any, base_url: str = "") -> str:
    """The HTML report's URL from publish's return value ('' when there is none to link)."""
    html = ((published or {}).get("files") or {}).get("html") if isinstance(published, dict) else None
    if not html:
        return ""
    path = PurePosixPath(str(html).split("://", 1)[-1])  # a local path or an object-storage URL
    parts = (path.parent.parent.name, path.parent.name, path.name)
    return base_url.rstrip("/") + URL_PREFIX + "/reports/" + "/".join(quote(p, safe="") for p in parts)


class ReportLink(BaseOperatorLink):
    name = "Report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.configuration import conf  # noqa: PLC0415 - only where the link is made

        published = ti_key.xcom_pull(task_ids=ti_key.task_id)  # publish's return value, pushed just before
        return report_url(published, conf.get("api", "base_url", fallback="") or "")


class BakeoffLinksPlugin(AirflowPlugin):
    name = "bakeoff_links"
    operator_extra_links = [ReportLink()]
