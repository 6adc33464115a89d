"""The Airflow plugin: mounts the status app on the API server and adds "lakesync" to the UI's navigation."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from lakesync_airflow.views import app


class LakesyncPlugin(AirflowPlugin):
    # Plain list attributes, as AirflowPlugin declares them (a ClassVar would conflict with its declaration).
    name = "lakesync"
    fastapi_apps: list[Any] = [{"app": app, "url_prefix": "/lakesync", "name": "lakesync status"}]  # noqa: RUF012
    external_views: list[Any] = [{  # noqa: RUF012
        "name": "lakesync",
        "href": "lakesync/status",
        "destination": "nav",
        "url_route": "lakesync",
        "category": "browse",
    }]
