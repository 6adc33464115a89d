"""Entry point Airflow's plugin loader finds: the lakesync plugin (status view) lives in the package."""

from lakesync_airflow.plugin import LakesyncPlugin

__all__ = ["LakesyncPlugin"]
