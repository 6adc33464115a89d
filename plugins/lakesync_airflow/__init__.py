"""lakesync's Airflow integration: hook, operators, deferrable sensor and trigger, DAG factory, status view.

Imported as a package from the plugins folder (Airflow puts it on ``sys.path``). Every module keeps its
top level light (no pyspark, deltalake or PyMySQL imports) because the DAG file imports it at parse time.
"""
