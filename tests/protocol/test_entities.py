"""Tests for klog.protocol.entities: build kio entities from plain values, any version."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from klog.protocol import apis
from klog.protocol.entities import as_millis, build, field_names
from klog.protocol.errors import ErrorCode

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _metadata_values() -> dict:
    """One version-independent description of a Metadata response."""
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    return {
        "throttle_time": 25,
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "abc",
        "controller_id": 0,
        "topics": [{
            "error_code": 0, "name": "t", "topic_id": topic_id, "is_internal": False,
            "partitions": [{
                "error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": 0,
                "leader_id": 0, "leader_epoch": 3, "replica_nodes": [0],
                "isr_nodes": [0], "offline_replicas": [],
            }],
            "topic_authorized_operations": -2147483648,
        }],
        "cluster_authorized_operations": -2147483648,
    }


@pytest.mark.parametrize("version", range(0, 13))
def test_one_description_builds_every_metadata_version(version: int) -> None:
    entity_type = apis.spec_for(3).response_entity(version)
    entity = build(entity_type, _metadata_values())
    assert type(entity) is entity_type
    # it encodes, and kio reads back what we described, in that version's terms
    decoded = apis.decode_response(3, version, apis.encode_response(entity))
    assert decoded == entity
    partition = decoded.topics[0].partitions[0]
    assert partition.error_code is KioErrorCode.leader_not_available
    assert partition.replica_nodes == (0,)
    assert decoded.brokers[0].host == "127.0.0.1"
    names = field_names(entity_type)
    assert ("throttle_time" in names) == (version >= 3)
    if version >= 3:
        assert decoded.throttle_time == datetime.timedelta(milliseconds=25)
    if version >= 10:
        assert decoded.topics[0].topic_id == uuid.UUID("12345678-1234-5678-1234-567812345678")
    if version >= 2:
        assert decoded.cluster_id == "abc"


def test_keys_of_other_versions_are_dropped() -> None:
    entity_type = apis.spec_for(18).response_entity(0)
    entity = build(entity_type, {
        "error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time": 5, "supported_features": [], "zk_migration_ready": True,
        "no_such_field_anywhere": object(),
    })
    assert field_names(entity_type) == {"error_code", "api_keys"}
    assert entity.api_keys[0].max_version == 4


def test_missing_optional_fields_take_their_defaults() -> None:
    entity_type = apis.spec_for(18).response_entity(3)
    entity = build(entity_type, {"error_code": 0, "api_keys": [], "throttle_time": 0})
    assert entity.finalized_features_epoch == -1
    assert entity.supported_features == ()


def test_a_missing_required_field_names_it() -> None:
    entity_type = apis.spec_for(18).response_entity(0)
    with pytest.raises(TypeError, match="'api_keys'"):
        build(entity_type, {"error_code": 0})
    with pytest.raises(TypeError, match="'max_version'"):
        build(entity_type, {"error_code": 0, "api_keys": [{"api_key": 1, "min_version": 0}]})


def test_value_conversions() -> None:
    # Produce v9 response: durations, error codes, datetimes, nested tuples
    entity_type = apis.spec_for(0).response_entity(9)
    entity = build(entity_type, {
        "throttle_time": datetime.timedelta(milliseconds=7),  # a timedelta stays
        "responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time": 1_700_000_000_123,
             "log_start_offset": 0, "record_errors": [], "error_message": None},
            {"index": 1, "error_code": int(ErrorCode.CORRUPT_MESSAGE), "base_offset": -1,
             "log_append_time": -1, "log_start_offset": -1,
             "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
             "error_message": "corrupt"},
        ]}],
    })
    assert entity.throttle_time == datetime.timedelta(milliseconds=7)
    ok, bad = entity.responses[0].partition_responses
    assert isinstance(entity.responses, tuple) and isinstance(ok.record_errors, tuple)
    assert ok.error_code is KioErrorCode.none
    assert bad.error_code is KioErrorCode.corrupt_message
    assert ok.log_append_time == EPOCH + datetime.timedelta(milliseconds=1_700_000_000_123)
    assert as_millis(ok.log_append_time) == 1_700_000_000_123
    assert bad.record_errors[0].batch_index_error_message == "bad"
    decoded = apis.decode_response(0, 9, apis.encode_response(entity))
    assert decoded.responses[0].partition_responses[1].error_message == "corrupt"
    # -1, Kafka's "no append time", reads back as kio's None
    assert decoded.responses[0].partition_responses[1].log_append_time is None


def test_uuid_values_in_any_form() -> None:
    entity_type = apis.spec_for(3).response_entity(12)
    value = uuid.uuid4()
    for given in (value, str(value), value.bytes):
        values = _metadata_values()
        values["topics"][0]["topic_id"] = given
        assert build(entity_type, values).topics[0].topic_id == value
    values = _metadata_values()
    values["topics"][0]["topic_id"] = None
    assert build(entity_type, values).topics[0].topic_id is None


def test_nested_entities_may_be_given_built() -> None:
    response_type = apis.spec_for(18).response_entity(3)
    api_key_type = type(build(response_type, {
        "error_code": 0, "throttle_time": 0,
        "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}]}).api_keys[0])
    ready = api_key_type(api_key=1, min_version=4, max_version=12)
    entity = build(response_type, {"error_code": 0, "throttle_time": 0,
                                   "api_keys": [ready, {"api_key": 3, "min_version": 0,
                                                        "max_version": 12}]})
    assert entity.api_keys[0] is ready
    assert entity.api_keys[1].api_key == 3


def test_requests_build_too() -> None:
    """The same helper makes requests (klog's own client and the tests use it)."""
    request_type = apis.spec_for(1).request_entity(12)
    request = build(request_type, {
        "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 10,
                                                  "partition_max_bytes": 4096}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
    assert request.max_wait == datetime.timedelta(milliseconds=500)
    assert request.topics[0].partitions[0].current_leader_epoch == -1  # default
    decoded = apis.decode_request(1, 12, apis.encode_request(request))
    assert decoded == request
    assert as_millis(decoded.max_wait) == 500


def test_an_unknown_error_code_is_refused() -> None:
    entity_type = apis.spec_for(18).response_entity(0)
    with pytest.raises(ValueError):
        build(entity_type, {"error_code": 31337, "api_keys": []})


def test_as_millis() -> None:
    assert as_millis(datetime.timedelta(seconds=1.5)) == 1500
    assert as_millis(datetime.timedelta(0)) == 0
    assert as_millis(EPOCH + datetime.timedelta(milliseconds=42)) == 42
    assert as_millis(EPOCH - datetime.timedelta(milliseconds=1)) == -1
    assert as_millis(-1) == -1
    assert as_millis(2**40) == 2**40


def test_field_names_of_a_request() -> None:
    assert field_names(apis.spec_for(18).request_entity(3)) == {
        "client_software_name", "client_software_version"}
    assert field_names(apis.spec_for(18).request_entity(0)) == frozenset()
