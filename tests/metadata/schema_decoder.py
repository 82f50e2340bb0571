"""An independent decoder (and encoder) of metadata record values, built from Kafka's JSON
schema files.

It reads the schemas vendored in tests/metadata/schemas/ (Kafka's
metadata/src/main/resources/common/metadata/*.json, unchanged) and decodes a record value
(Kafka's ``AbstractApiMessageSerde`` framing, then the flexible-version body) into plain dicts
keyed by Kafka's field names; :func:`encode` writes such dicts as Kafka's generated code does,
for bytes kraft did not write. It uses nothing of kraft -- not its structs, its codec tables or
its varint helpers -- so that kraft's bytes are checked against the schema text itself.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).parent / "schemas"

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "float64": struct.Struct(">d"),
}


@dataclass(frozen=True)
class Versions:
    """A schema version range: "3+", "0-2", "1" or "none"."""

    low: int
    high: int | None  # None: no upper bound

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)  # empty
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


def _strip_comments(text: str) -> str:
    # Kafka's schema files carry a license header and notes as // line comments, not JSON.
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


@cache
def load_schemas() -> dict[int, dict[str, Any]]:
    """Every vendored schema, by api key."""
    schemas = {}
    for path in sorted(SCHEMA_DIR.glob("*.json")):
        schema = json.loads(_strip_comments(path.read_text()))
        schemas[schema["apiKey"]] = schema
    return schemas


def schema_named(name: str) -> dict[str, Any]:
    return next(s for s in load_schemas().values() if s["name"] == name)


def schema_versions(schema: dict[str, Any]) -> range:
    """A schema's ``validVersions``, always a closed range."""
    versions = Versions.parse(schema["validVersions"])
    assert versions.high is not None
    return range(versions.low, versions.high + 1)


def field_versions(field: dict[str, Any]) -> Versions:
    return Versions.parse(field["versions"])


def is_nullable(field: dict[str, Any], version: int) -> bool:
    return version in Versions.parse(field.get("nullableVersions"))


def is_tagged(field: dict[str, Any], version: int) -> bool:
    return version in Versions.parse(field.get("taggedVersions"))


def default_of(field: dict[str, Any]) -> Any:
    """The schema default of a field, as this decoder represents values."""
    kind = field["type"]
    default = field.get("default")
    if default == "null":
        return None
    if kind.startswith("[]"):
        return []
    if kind == "bool":
        return default == "true"
    if kind in ("int8", "int16", "int32", "int64", "uint16"):
        return int(default, 0) if default else 0
    if kind == "float64":
        return float(default) if default else 0.0
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind == "bytes":
        return b""
    return default or ""


class SchemaDecodeError(Exception):
    pass


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise SchemaDecodeError(f"need {n} bytes at {self.pos}, have {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise SchemaDecodeError("unsigned varint too long")


def _read_value(cur: _Cursor, field: dict[str, Any], kind: str, version: int) -> Any:
    nullable = is_nullable(field, version)
    if kind in _FIXED:
        fmt = _FIXED[kind]
        return fmt.unpack(cur.take(fmt.size))[0]
    if kind == "bool":
        return cur.take(1)[0] != 0
    if kind == "uuid":
        return uuid.UUID(bytes=cur.take(16))
    if kind in ("string", "bytes"):
        length = cur.uvarint() - 1
        if length < 0:
            if not nullable:
                raise SchemaDecodeError(f"null {field['name']}")
            return None
        raw = cur.take(length)
        return raw.decode("utf-8") if kind == "string" else raw
    if kind.startswith("[]"):
        count = cur.uvarint() - 1
        if count < 0:
            if not nullable:
                raise SchemaDecodeError(f"null {field['name']}")
            return None
        element = kind[2:]
        if "fields" in field:  # an array of structs
            return [_read_struct(cur, field["fields"], version) for _ in range(count)]
        return [_read_value(cur, {"name": field["name"]}, element, version) for _ in range(count)]
    raise SchemaDecodeError(f"unknown type {kind}")


def _read_struct(cur: _Cursor, fields: list[dict[str, Any]], version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged: dict[int, dict[str, Any]] = {}
    for field in fields:
        if version not in field_versions(field):
            continue
        if is_tagged(field, version):
            tagged[int(field["tag"])] = field
            out[field["name"]] = default_of(field)
        else:
            out[field["name"]] = _read_value(cur, field, field["type"], version)
    last_tag = -1
    for _ in range(cur.uvarint()):
        tag = cur.uvarint()
        if tag <= last_tag:
            raise SchemaDecodeError(f"tag {tag} after tag {last_tag}: not in ascending order")
        last_tag = tag
        size = cur.uvarint()
        raw = cur.take(size)
        if tag not in tagged:
            raise SchemaDecodeError(f"unknown tag {tag}")
        inner = _Cursor(raw)
        value = _read_value(inner, tagged[tag], tagged[tag]["type"], version)
        if inner.pos != size:
            raise SchemaDecodeError(f"tag {tag}: {size - inner.pos} bytes left over")
        if value == default_of(tagged[tag]):
            raise SchemaDecodeError(f"tag {tag} written at its default value {value!r}")
        out[tagged[tag]["name"]] = value
    return out


@dataclass(frozen=True)
class Decoded:
    name: str
    api_key: int
    version: int
    fields: dict[str, Any]


def decode(data: bytes) -> Decoded:
    """Decode one record value; every byte must be used."""
    cur = _Cursor(bytes(data))
    frame = cur.uvarint()
    if frame != 1:
        raise SchemaDecodeError(f"frame version {frame}")
    api_key = cur.uvarint()
    version = cur.uvarint()
    schema = load_schemas()[api_key]
    if version not in schema_versions(schema):
        raise SchemaDecodeError(f"{schema['name']} has no version {version}")
    fields = _read_struct(cur, schema["fields"], version)
    if cur.pos != len(cur.data):
        raise SchemaDecodeError(f"{len(cur.data) - cur.pos} bytes after the record")
    return Decoded(schema["name"], api_key, version, fields)


def snake_case(name: str) -> str:
    """Kafka's field name in the snake_case kraft's structs use: ``LeaderRecoveryState`` ->
    ``leader_recovery_state``, ``Isr`` -> ``isr``, ``LastKnownElr`` -> ``last_known_elr``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


# -- encoding, as Kafka's generated write() ---------------------------------------------------


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _write_value(field: dict[str, Any], kind: str, value: Any, version: int) -> bytes:
    if kind in _FIXED:
        return _FIXED[kind].pack(value)
    if kind == "bool":
        return b"\x01" if value else b"\x00"
    if kind == "uuid":
        return bytes(value.bytes)
    if kind in ("string", "bytes"):
        if value is None:
            assert is_nullable(field, version)
            return b"\x00"
        raw = value.encode("utf-8") if kind == "string" else bytes(value)
        return _uvarint_bytes(len(raw) + 1) + raw
    assert kind.startswith("[]"), kind
    if value is None:
        assert is_nullable(field, version)
        return b"\x00"
    out = _uvarint_bytes(len(value) + 1)
    for item in value:
        if "fields" in field:
            out += _write_struct(field["fields"], item, version)
        else:
            out += _write_value({"name": field["name"]}, kind[2:], item, version)
    return out


def _write_struct(fields: list[dict[str, Any]], values: dict[str, Any], version: int) -> bytes:
    out = b""
    tagged: dict[int, bytes] = {}
    for field in fields:
        if version not in field_versions(field):
            continue
        value = values[field["name"]]
        if is_tagged(field, version):
            if value != default_of(field):
                tagged[int(field["tag"])] = _write_value(field, field["type"], value, version)
        else:
            out += _write_value(field, field["type"], value, version)
    out += _uvarint_bytes(len(tagged))
    for tag in sorted(tagged):
        out += _uvarint_bytes(tag) + _uvarint_bytes(len(tagged[tag])) + tagged[tag]
    return out


def encode(api_key: int, version: int, fields: dict[str, Any]) -> bytes:
    """The record value of a record given as a dict under Kafka's field names (every field of
    ``version``), framed and written as Kafka writes it."""
    schema = load_schemas()[api_key]
    assert version in schema_versions(schema)
    header = _uvarint_bytes(1) + _uvarint_bytes(api_key) + _uvarint_bytes(version)
    return header + _write_struct(schema["fields"], fields, version)
