"""lakesync's Airflow DAGs, one set per pipeline file in include/pipelines/ (see lakesync_airflow.factory).

Kept thin: parsing reads the YAML files and builds DAG objects, nothing more. An invalid pipeline file
makes this file fail to import, with the file and field named in the import error.
"""

from airflow.sdk import DAG
from lakesync_airflow.factory import pipeline_dags

_dags: list[DAG] = pipeline_dags()
globals().update({dag.dag_id: dag for dag in _dags})
