"""Malformed and contradictory pipeline files: each refused at load time with the file, the field and a fix.

A configuration error is raised before anything connects, so "nothing written" here means the state and
Delta folders the pipeline names were never created.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from lakesync.core.config import load_pipeline
from lakesync.core.connections import kafka_client_config, mysql_connection
from lakesync.core.errors import ConfigError
from tests.bad_input.badkit import base_document, write_pipeline

pytestmark = pytest.mark.bad_input


@pytest.fixture
def document(tmp_path: Path) -> dict[str, Any]:
    return base_document("cfg", "shop", tmp_path)


def _refused(tmp_path: Path, document: dict[str, Any], *words: str, file_name: str | None = None) -> ConfigError:
    write_pipeline(tmp_path / "pipelines", document, file_name=file_name)
    with pytest.raises(ConfigError) as caught:
        load_pipeline(file_name or document["name"], tmp_path / "pipelines")
    text = str(caught.value)
    for word in words:
        assert word in text, f"{word!r} missing from: {text}"
    assert caught.value.hint, "every configuration error says what to do"
    assert not (tmp_path / "state").exists() and not (tmp_path / "delta").exists()
    return caught.value


def test_unknown_key_is_refused_with_its_path(tmp_path, document):
    document["source"]["servr_id"] = 7
    _refused(tmp_path, document, "cfg.yaml", "source.servr_id", "Extra inputs are not permitted")


def test_misspelt_top_level_section_is_refused(tmp_path, document):
    document["snapshots"] = {"mode": "chunked"}
    _refused(tmp_path, document, "snapshots")


def test_wrong_type_is_refused_with_the_field(tmp_path, document):
    document["source"]["server_id"] = "four"
    _refused(tmp_path, document, "source.server_id", "integer")


def test_negative_partitions_are_refused(tmp_path, document):
    document["kafka"]["partitions"] = 0
    _refused(tmp_path, document, "kafka.partitions", "greater than or equal to 1")


def test_unknown_snapshot_mode_is_refused(tmp_path, document):
    document["snapshot"] = {"mode": "fast"}
    _refused(tmp_path, document, "snapshot.mode", "consistent", "chunked")


def test_missing_source_is_refused(tmp_path, document):
    del document["source"]
    _refused(tmp_path, document, "source", "Field required")


def test_neither_kafka_conn_id_nor_bootstrap_servers_is_refused(tmp_path, document):
    document["kafka"].pop("conn_id")
    _refused(tmp_path, document, "kafka", "conn_id", "bootstrap_servers")


def test_both_kafka_conn_id_and_bootstrap_servers_is_refused(tmp_path, document):
    document["kafka"]["bootstrap_servers"] = "127.0.0.1:9092"
    _refused(tmp_path, document, "kafka", "conn_id", "bootstrap_servers", "not both")


def test_the_removed_python_kafka_reader_is_refused_with_what_to_do(tmp_path, document):
    document["stream"] = {"kafka_reader": "lakesync"}
    error = _refused(tmp_path, document, "stream", "kafka_reader was removed", "Delete the line")
    assert "carried over" in str(error)


def test_the_former_setting_naming_sparks_reader_still_loads_with_a_warning(tmp_path, document, caplog):
    document["stream"] = {"kafka_reader": "spark", "decode": "python"}
    write_pipeline(tmp_path / "pipelines", document)
    assert load_pipeline(document["name"], tmp_path / "pipelines").stream.decode == "python"
    assert "stream.kafka_reader is no longer a setting" in caplog.text


def test_unset_environment_reference_is_refused(tmp_path, document, monkeypatch):
    monkeypatch.delenv("LAKESYNC_BAD_ROOT", raising=False)
    document["delta"]["root"] = "${LAKESYNC_BAD_ROOT}/delta"
    error = _refused(tmp_path, document, "cfg.yaml", "${LAKESYNC_BAD_ROOT} is used but not set")
    assert "export LAKESYNC_BAD_ROOT" in (error.hint or "")


def test_name_that_does_not_match_the_file_is_refused(tmp_path, document):
    error = _refused(tmp_path, document, "name is 'cfg'", "'other'", file_name="other")
    assert "rename the file" in (error.hint or "")


def test_empty_key_columns_is_refused(tmp_path, document):
    document["tables"] = {"overrides": {"orders": {"key_columns": []}}}
    _refused(tmp_path, document, "overrides.orders.key_columns is empty")


def test_pipeline_name_with_a_path_or_dash_is_refused(tmp_path, document):
    document["name"] = "../etc-passwd"
    _refused(tmp_path, document, "name", "should match pattern", file_name="weird")


def test_unknown_semantics_is_refused(tmp_path, document):
    document["tables"] = {"overrides": {"orders": {"semantics": "at_most_once"}}}
    _refused(tmp_path, document, "tables.overrides.orders.semantics", "exactly_once", "append_log")


def test_yaml_syntax_error_is_refused(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "broken.yaml").write_text("name: broken\nsource: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_pipeline("broken", tmp_path / "pipelines")


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "list.yaml").write_text("- name: list\n")
    with pytest.raises(ConfigError, match="must be a mapping of settings, got list"):
        load_pipeline("list", tmp_path / "pipelines")


def test_missing_pipeline_lists_the_ones_there(tmp_path, document):
    write_pipeline(tmp_path / "pipelines", document)
    with pytest.raises(ConfigError) as caught:
        load_pipeline("nope", tmp_path / "pipelines")
    assert "no pipeline called 'nope'" in caught.value.message and "cfg" in (caught.value.hint or "")


def test_undefined_connection_says_which_variable_to_export(tmp_path, document, monkeypatch):
    document["source"]["conn_id"] = "no_such_conn"
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_CONN", raising=False)
    write_pipeline(tmp_path / "pipelines", document)
    pipeline = load_pipeline("cfg", tmp_path / "pipelines")
    with pytest.raises(ConfigError) as caught:
        mysql_connection(pipeline)
    assert "connection 'no_such_conn' is not defined" in caught.value.message
    assert "AIRFLOW_CONN_NO_SUCH_CONN" in (caught.value.hint or "")


def test_kafka_connection_without_a_broker_address_is_refused(tmp_path, document, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_EMPTY_KAFKA", '{"conn_type": "kafka", "extra": {}}')
    broken = copy.deepcopy(document)
    broken["kafka"]["conn_id"] = "empty_kafka"
    write_pipeline(tmp_path / "pipelines", broken)
    with pytest.raises(ConfigError, match="does not say where the broker is"):
        kafka_client_config(load_pipeline("cfg", tmp_path / "pipelines"))
