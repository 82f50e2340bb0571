"""kraft's metadata records against Kafka's JSON schemas (tests/metadata/schemas/).

Records are generated from the schema text (every field a version has, over its type's whole
range), built as kraft's structs under Kafka's names in snake_case, encoded by kraft, and then
decoded twice: by kraft (the round trip) and by the independent decoder built from the schemas
(schema_decoder.py), which must find every field's value.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_decoder import decode as schema_decode
from schema_decoder import (
    default_of,
    field_versions,
    is_nullable,
    load_schemas,
    schema_versions,
    snake_case,
)
from schema_decoder import encode as schema_encode

from kraft.metadata import records
from kraft.metadata.codec import decode_record, encode_record, valid_versions
from kraft.metadata.records import ApiMessageAndVersion, MetadataRecordType

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def _value_strategy(field: dict[str, Any], kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.integers(low, high)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return st.uuids() | st.just(uuid.UUID(int=0))
    if kind == "string":
        return st.text(max_size=12)
    if kind == "bytes":
        return st.binary(max_size=12)
    assert kind.startswith("[]"), kind
    element = kind[2:]
    if "fields" in field:
        cls = getattr(records, element)
        elements = _struct_strategy(cls, field["fields"], 0)
    else:
        elements = _value_strategy({}, element)
    return st.lists(elements, max_size=4).map(tuple)


def _struct_strategy(cls: type, fields: list[dict[str, Any]], version: int) -> Any:
    kwargs = {}
    for field in fields:
        if version not in field_versions(field):
            continue  # absent in this version: the struct's default, which must be Kafka's
        value = _value_strategy(field, field["type"])
        if is_nullable(field, version):
            value = st.none() | value
        kwargs[snake_case(field["name"])] = value
    return st.builds(cls, **kwargs)


@st.composite
def _any_record(draw: st.DrawFn) -> ApiMessageAndVersion:
    schema = draw(st.sampled_from(sorted(load_schemas().values(), key=lambda s: s["apiKey"])))
    version = draw(st.sampled_from(schema_versions(schema)))
    cls = getattr(records, schema["name"])
    return ApiMessageAndVersion(draw(_struct_strategy(cls, schema["fields"], version)), version)


def _as_schema_values(value: Any) -> Any:
    """kraft's value in the decoder's representation: structs as dicts, tuples as lists."""
    if isinstance(value, msgspec.Struct):
        return {name: _as_schema_values(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, tuple):
        return [_as_schema_values(item) for item in value]
    return value


def _expected_fields(
    fields: list[dict[str, Any]], struct: msgspec.Struct, version: int
) -> dict[str, Any]:
    out = {}
    for field in fields:
        if version not in field_versions(field):
            continue
        value = getattr(struct, snake_case(field["name"]))
        if "fields" in field:
            out[field["name"]] = [_expected_fields(field["fields"], v, version) for v in value]
        else:
            out[field["name"]] = _as_schema_values(value)
    return out


def _schema_value(field: dict[str, Any], kind: str, version: int) -> st.SearchStrategy[Any]:
    """A value of ``kind`` as the schema module represents it (lists and dicts)."""
    if kind.startswith("[]"):
        if "fields" in field:
            elements = _schema_struct(field["fields"], version)
        else:
            elements = _schema_value({}, kind[2:], version)
        return st.lists(elements, max_size=4)
    return _value_strategy(field, kind)


def _schema_struct(fields: list[dict[str, Any]], version: int) -> st.SearchStrategy[Any]:
    values = {}
    for field in fields:
        if version in field_versions(field):
            value = _schema_value(field, field["type"], version)
            values[field["name"]] = st.none() | value if is_nullable(field, version) else value
    return st.fixed_dictionaries(values)


@st.composite
def _any_schema_record(draw: st.DrawFn) -> tuple[int, int, dict[str, Any]]:
    schema = draw(st.sampled_from(sorted(load_schemas().values(), key=lambda s: s["apiKey"])))
    version = draw(st.sampled_from(schema_versions(schema)))
    return schema["apiKey"], version, draw(_schema_struct(schema["fields"], version))


@settings(max_examples=600, deadline=None)
@given(_any_schema_record())
def test_bytes_written_from_the_schema_decode_in_kraft(
    record: tuple[int, int, dict[str, Any]],
) -> None:
    """The other direction: bytes kraft did not write (the schema module writes them as Kafka's
    generated code does) decode in kraft to the same fields."""
    api_key, version, fields = record
    decoded = decode_record(schema_encode(api_key, version, fields))
    assert (decoded.message.api_key, decoded.version) == (api_key, version)
    schema = load_schemas()[api_key]
    assert _expected_fields(schema["fields"], decoded.message, version) == fields


@settings(max_examples=600, deadline=None)
@given(_any_record())
def test_every_record_round_trips_and_decodes_from_the_schema(record: ApiMessageAndVersion) -> None:
    data = encode_record(record)
    assert decode_record(data) == record
    assert decode_record(memoryview(data)) == record

    decoded = schema_decode(data)
    assert decoded.name == type(record.message).__name__
    assert decoded.api_key == record.message.api_key
    assert decoded.version == record.version
    schema = load_schemas()[decoded.api_key]
    assert decoded.fields == _expected_fields(schema["fields"], record.message, record.version)


def test_kraft_has_a_struct_and_an_api_key_for_every_schema() -> None:
    schemas = load_schemas()
    assert {s["name"] for s in schemas.values()} == {
        cls.__name__ for cls in records.MetadataRecord.__args__
    }
    for api_key, schema in schemas.items():
        record_type = MetadataRecordType(api_key)
        assert getattr(records, schema["name"]).api_key is record_type
        assert schema["name"].upper().replace("_", "") == (
            record_type.name.replace("_", "") + "RECORD"
        )
        assert valid_versions(record_type) == schema_versions(schema)


def test_every_struct_field_is_a_schema_field_with_the_schema_default() -> None:
    """Fields, their order and their defaults are Kafka's (nullable strings default to None in
    kraft, where Kafka's generated constructors use "": records.py says why)."""

    def check(cls: type[msgspec.Struct], fields: list[dict[str, Any]]) -> None:
        assert cls.__struct_fields__ == tuple(snake_case(f["name"]) for f in fields)
        instance = cls()
        for field in fields:
            value = _as_schema_values(getattr(instance, snake_case(field["name"])))
            if field["type"] == "string" and "nullableVersions" in field:
                assert value is None
            else:
                assert value == default_of(field), (cls.__name__, field["name"])
            if "fields" in field:
                check(getattr(records, field["type"][2:]), field["fields"])

    for schema in load_schemas().values():
        check(getattr(records, schema["name"]), schema["fields"])


@pytest.mark.parametrize(
    ("record_type", "version"),
    [
        (MetadataRecordType.REGISTER_BROKER, 3),
        (MetadataRecordType.BROKER_REGISTRATION_CHANGE, 2),
        (MetadataRecordType.PARTITION, 1),
        (MetadataRecordType.PARTITION_CHANGE, 1),
        (MetadataRecordType.TOPIC, 0),
        (MetadataRecordType.FEATURE_LEVEL, 0),
        (MetadataRecordType.NO_OP, 0),
    ],
)
def test_kraft_writes_the_versions_of_metadata_version_3_9(
    record_type: MetadataRecordType, version: int
) -> None:
    assert records.record_version(record_type) == version
    assert (records.METADATA_VERSION, records.METADATA_VERSION_NAME) == (21, "3.9-IV0")
