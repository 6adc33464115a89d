"""The Airflow plugin: mounts the status app on the API server and adds "lakesync" to the UI's navigation."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from lakesync_airflow.views import app


class LakesyncPlugin(AirflowPlugin):
    name = "lakesync"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [{"app": app, "url_prefix": "/lakesync", "name": "lakesync status"}]
    external_views: ClassVar[list[dict[str, Any]]] = [{
        "name": "lakesync",
        "href": "lakesync/status",
        "destination": "nav",
        "url_route": "lakesync",
        "category": "browse",
    }]
