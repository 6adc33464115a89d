# The lakesync image: Airflow 3 (api-server, scheduler, dag-processor, triggerer) with lakesync installed, plus a
# JDK so tasks can run spark-submit as a client of the Spark cluster (a JDK: lakesync compiles its small Delta
# LogStore for S3 once, at the first Spark session). The relay runs from it too.
# Built by docker-compose.yaml with the repository as context (deploy/airflow.Dockerfile.dockerignore keeps
# the context to the package sources).
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

ARG AIRFLOW_VERSION
# The driver's pyspark must be the cluster's Spark version exactly; compose passes the same SPARK_VERSION
# to deploy/spark.Dockerfile.
ARG SPARK_VERSION=4.2.0

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jdk-headless procps \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
# Executors find their Python at /opt/lakesync/venv/bin/python (spark.pyspark.python); here that path is
# Airflow's own interpreter, so the driver and the executors name the same path and the same Python version.
RUN mkdir -p /opt/lakesync/venv/bin /opt/lakesync/state /opt/lakesync/src \
    && ln -s "$(command -v python)" /opt/lakesync/venv/bin/python \
    && chown -R airflow:0 /opt/lakesync \
    && chmod -R g+rwX /opt/lakesync

USER airflow
COPY --chown=airflow:0 . /opt/lakesync/src
# Pinning apache-airflow keeps pip from up- or downgrading the Airflow the image was built with.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "pyspark==${SPARK_VERSION}" /opt/lakesync/src
