# Spark master and worker: the Apache Spark image plus the Python the lakesync driver runs (same minor version,
# which PySpark requires of its executors) with lakesync and its dependencies, because the Kafka data source
# and the Delta writes run on the executors.
ARG SPARK_VERSION=4.2.0
FROM apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu

ARG SPARK_VERSION
ARG PYTHON_VERSION=3.11

USER root
# Ubuntu's python3 is not the driver's version; uv installs a standalone CPython of PYTHON_VERSION.
ENV UV_PYTHON_INSTALL_DIR=/opt/python UV_NO_CACHE=1
RUN pip3 install --no-cache-dir "uv>=0.5,<1" \
    && uv venv --python "${PYTHON_VERSION}" /opt/lakesync/venv
COPY . /opt/lakesync/src
RUN uv pip install --python /opt/lakesync/venv/bin/python "pyspark==${SPARK_VERSION}" /opt/lakesync/src \
    && chmod -R a+rX /opt/python /opt/lakesync

ENV PYSPARK_PYTHON=/opt/lakesync/venv/bin/python
USER spark
