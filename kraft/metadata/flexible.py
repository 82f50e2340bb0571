"""Kafka's flexible-version message encoding, the part of Kafka's generated code that every
message shares (``Readable``/``Writable``, ``ByteBufferAccessor``, the tagged-field sections),
driven by field tables instead of generated classes.

A :class:`Plan` holds the fields of one struct at one version and compiles them into a ``read``
and a ``write`` function; ``kraft.metadata.codec`` gives the tables of Kafka's metadata records
and the record framing. Every type is written as Kafka writes it in flexible versions:
``int8``/``int16``/``int32``/``int64``/``uint16``/``float64`` fixed-width big-endian, ``bool``
one byte, ``uuid`` 16 bytes, ``string`` and ``bytes`` *compact* (unsigned varint ``length + 1``,
0 for null), ``[]T`` *compact arrays* (unsigned varint ``count + 1``, 0 for null), and every
struct ending with its tagged fields (unsigned varint count, then per field in tag order
``uvarint tag, uvarint size, value``; written only when not at their default; unknown tags
skipped when read).

Reading raises :class:`DecodeError` (the codec turns it into a ``MetadataRecordError``);
writing raises ``ValueError`` or ``TypeError`` naming the struct, version and field.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from kraft.errors import CorruptRecordError
from kraft.record.varint import read_uvarint, uvarint_bytes

__all__ = [
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "STRING",
    "UINT16",
    "UUID",
    "DecodeError",
    "Field",
    "Plan",
    "array",
    "nested",
]

_MAX_STRING_BYTES: Final = 0x7FFF  # Kafka's limit for a string field, on write and on read

_Writer = Callable[[bytearray, Any], None]
_Reader = Callable[[Any, int], tuple[Any, int]]  # (buffer, position) -> (value, next position)


class DecodeError(Exception):
    """A decoding failure inside a record; ``path`` grows as it leaves nested structs."""

    def __init__(self, reason: str, position: int, path: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position
        self.path = path


def _uvarint(buf: Any, pos: int) -> tuple[int, int]:
    # One-byte fast path: lengths and counts in metadata records are almost always < 128.
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint(buf, pos)


class _Type:
    """How one schema type is written and read, non-nullable and nullable."""

    __slots__ = ("fmt", "name", "read", "read_nullable", "write", "write_nullable")

    def __init__(
        self,
        name: str,
        write: _Writer,
        read: _Reader,
        write_nullable: _Writer | None = None,
        read_nullable: _Reader | None = None,
        *,
        fmt: str | None = None,
    ) -> None:
        self.name = name
        self.write = write
        self.read = read
        self.write_nullable = write_nullable
        self.read_nullable = read_nullable
        #: The ``struct`` format of a fixed-width type (None for the others): consecutive
        #: fixed-width fields are read and written with one ``struct.Struct`` (see Plan).
        self.fmt = fmt


def _fixed(name: str, fmt: str) -> _Type:
    codec = struct.Struct(fmt)
    pack, unpack_from, size = codec.pack, codec.unpack_from, codec.size

    def write(out: bytearray, value: Any) -> None:
        try:
            out += pack(value)
        except struct.error as exc:
            raise ValueError(f"{value!r} is not a valid {name}") from exc

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    return _Type(name, write, read, fmt=fmt[1:])


def _write_bool(out: bytearray, value: Any) -> None:
    out.append(1 if value else 0)


def _read_bool(buf: Any, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


def _write_uuid(out: bytearray, value: Any) -> None:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"{value!r} is not a uuid.UUID")
    out += value.bytes


def _take(buf: Any, pos: int, n: int, what: str) -> Any:
    end = pos + n
    if end > len(buf):
        raise DecodeError(f"{what} of {n} bytes runs past the end of the value", pos, [])
    return buf[pos:end]


# msgspec builds a UUID from MessagePack's bin 16 several times faster than uuid.UUID(bytes=...)
# does; snapshots of large images hold hundreds of thousands of uuids.
_UUID_FROM_BIN16: Final = msgspec.msgpack.Decoder(uuid.UUID).decode
_BIN16: Final = b"\xc4\x10"


# The uuids of an image repeat: every partition of a topic carries its topic id, and every
# replica one of a few directory ids. A bounded cache of the uuids read lately saves building
# them again (the values are immutable, so sharing them is safe).
_UUIDS_READ: Final[dict[bytes, uuid.UUID]] = {}
_UUIDS_READ_MAX: Final = 4096


def _uuid_of(raw: Any) -> uuid.UUID:
    raw = bytes(raw)
    value = _UUIDS_READ.get(raw)
    if value is None:
        if len(_UUIDS_READ) >= _UUIDS_READ_MAX:
            _UUIDS_READ.clear()
        value = _UUIDS_READ[raw] = _UUID_FROM_BIN16(_BIN16 + raw)
    return value


def _read_uuid(buf: Any, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("uuid of 16 bytes runs past the end of the value", pos, [])
    return _uuid_of(buf[pos:end]), end


def _write_length(out: bytearray, value: Any, nullable: bool) -> bool:
    """Write a compact length (``len + 1``, 0 for null); True when there is a value to follow."""
    if value is None:
        if not nullable:
            raise ValueError("null in a non-nullable field")
        out.append(0)
        return False
    length = len(value) + 1
    if length < 0x80:
        out.append(length)
    else:
        out += uvarint_bytes(length)
    return True


def _read_length(buf: Any, pos: int, nullable: bool) -> tuple[int, int]:
    """Read a compact length: -1 for null, which only a nullable field may hold."""
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = read_uvarint(buf, pos)
    if length == 0 and not nullable:
        raise DecodeError("null in a non-nullable field", pos - 1, [])
    return length - 1, pos


def _string_type() -> _Type:
    def write(out: bytearray, value: Any, nullable: bool = False) -> None:
        if value is not None:
            value = value.encode("utf-8")
            if len(value) > _MAX_STRING_BYTES:
                raise ValueError(f"string of {len(value)} bytes, more than {_MAX_STRING_BYTES}")
        if _write_length(out, value, nullable):
            out += value

    def read(buf: Any, pos: int, nullable: bool = False) -> tuple[str | None, int]:
        start = pos
        length, pos = _read_length(buf, pos, nullable)
        if length < 0:
            return None, pos
        if length > _MAX_STRING_BYTES:
            raise DecodeError(f"string of invalid length {length}", start, [])
        try:
            return str(_take(buf, pos, length, "string"), "utf-8"), pos + length
        except UnicodeDecodeError:
            raise DecodeError("string is not UTF-8", pos, []) from None

    return _Type(
        "string",
        write,
        read,
        functools.partial(write, nullable=True),
        functools.partial(read, nullable=True),
    )


def _write_bytes(out: bytearray, value: Any) -> None:
    if _write_length(out, value, False):
        out += value


def _read_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    length, pos = _read_length(buf, pos, False)
    return bytes(_take(buf, pos, length, "bytes")), pos + length


INT8: Final = _fixed("int8", ">b")
INT16: Final = _fixed("int16", ">h")
INT32: Final = _fixed("int32", ">i")
INT64: Final = _fixed("int64", ">q")
UINT16: Final = _fixed("uint16", ">H")
FLOAT64: Final = _fixed("float64", ">d")
BOOL: Final = _Type("bool", _write_bool, _read_bool, fmt="?")  # '?' reads any non-zero as True
UUID: Final = _Type("uuid", _write_uuid, _read_uuid, fmt="16s")
STRING: Final = _string_type()
BYTES: Final = _Type("bytes", _write_bytes, _read_bytes)


def _array_count(buf: Any, pos: int, width: int, nullable: bool) -> tuple[int, int]:
    """Read a compact array's count (-1 for null) and check that ``count`` elements of at least
    ``width`` bytes each fit in what is left: as Kafka does, so that a corrupt count cannot have
    us allocate or loop for a long time before failing."""
    start = pos
    count = buf[pos]
    if count < 0x80:
        pos += 1
    else:
        count, pos = read_uvarint(buf, pos)
    if count == 0:
        if nullable:
            return -1, pos
        raise DecodeError("null in a non-nullable field", start, [])
    count -= 1
    if count * width > len(buf) - pos:
        raise DecodeError(f"array of {count} elements in {len(buf) - pos} bytes", start, [])
    return count, pos


# struct.Struct objects for arrays of up to 64 int32: replica lists, ISRs and the like.
_INT32_ARRAYS: Final = [struct.Struct(f">{n}i") for n in range(65)]


def array(element: _Type) -> _Type:
    write_element, read_element = element.write, element.read
    # The arrays of int32 and of uuid (replicas, ISRs, directories: most of a large image) are
    # read without a call per element.
    width = {INT32: 4, UUID: 16}.get(element, 1)

    def write(out: bytearray, value: Any, nullable: bool = False) -> None:
        if isinstance(value, (str, bytes)):  # iterable, but never a list of elements
            raise TypeError(f"{value!r} is not a sequence of {element.name}")
        if not _write_length(out, value, nullable):
            return
        if element is INT32:
            try:
                out += struct.pack(f">{len(value)}i", *value)
                return
            except struct.error:
                pass  # the loop below names the element that does not fit
        for item in value:
            write_element(out, item)

    def read(buf: Any, pos: int, nullable: bool = False) -> tuple[tuple[Any, ...] | None, int]:
        count, pos = _array_count(buf, pos, width, nullable)
        if count < 0:
            return None, pos
        if element is INT32:
            codec = (
                _INT32_ARRAYS[count] if count < len(_INT32_ARRAYS) else struct.Struct(f">{count}i")
            )
            return codec.unpack_from(buf, pos), pos + 4 * count
        if element is UUID:
            end = pos + 16 * count
            return tuple([_uuid_of(buf[p : p + 16]) for p in range(pos, end, 16)]), end
        items = []
        for index in range(count):
            try:
                item, pos = read_element(buf, pos)
            except DecodeError as exc:
                exc.path.insert(0, f"[{index}]")
                raise
            items.append(item)
        return tuple(items), pos

    return _Type(
        f"[]{element.name}",
        write,
        read,
        functools.partial(write, nullable=True),
        functools.partial(read, nullable=True),
    )


class Field(NamedTuple):
    """One field of a schema: present from version ``since``; nullable from ``nullable``;
    tagged (in every version it is present in, as in every metadata schema) when ``tag`` is
    set. ``default`` comes from the struct, Kafka's default."""

    attr: str
    type: _Type
    since: int = 0
    nullable: int | None = None
    tag: int | None = None


def _at_default(value: Any, default: Any) -> bool:
    if isinstance(value, list):  # a list passed where the struct holds a tuple
        value = tuple(value)
    return bool(value == default)


class _Run(NamedTuple):
    """Consecutive fixed-width fields, read and written with one ``struct.Struct``."""

    attrs: tuple[str, ...]
    types: tuple[_Type, ...]
    codec: struct.Struct


_Step = _Run | tuple[str, _Writer, _Reader]


class Plan:
    """The fields of one struct at one version, and the ``read`` and ``write`` functions
    compiled from them.

    Like Kafka's generator, which writes a Java class per schema, the plan writes the source of
    one function per struct and version: straight-line code with the runs of fixed-width fields
    packed together, several times faster than walking the field list per record (snapshots of
    large images hold hundreds of thousands of records). The compiled code calls the same
    per-type functions as the rest of this module for every field that is not fixed-width, and
    on an error :meth:`_read_error` / :meth:`_write_error` name the field, so the speed changes
    no behaviour.
    """

    __slots__ = (
        "absent",
        "cls",
        "name",
        "read",
        "steps",
        "tagged",
        "tagged_by_tag",
        "write",
    )

    def __init__(self, cls: type[msgspec.Struct], fields: Sequence[Field], version: int) -> None:
        defaults = {
            name: default
            for name, default in zip(cls.__struct_fields__, _struct_defaults(cls), strict=True)
        }
        self.cls = cls
        self.name = f"{cls.__name__} v{version}"
        self.steps: list[_Step] = []
        self.tagged: list[tuple[int, str, _Writer, Any]] = []
        self.tagged_by_tag: dict[int, tuple[str, _Reader]] = {}
        self.absent: list[tuple[str, Any]] = []
        for field in fields:
            if version < field.since:
                self.absent.append((field.attr, defaults[field.attr]))
                continue
            nullable = field.nullable is not None and version >= field.nullable
            if nullable:
                assert field.type.write_nullable and field.type.read_nullable
                write, read = field.type.write_nullable, field.type.read_nullable
            else:
                write, read = field.type.write, field.type.read
            if field.tag is not None:
                self.tagged.append((field.tag, field.attr, write, defaults[field.attr]))
                self.tagged_by_tag[field.tag] = (field.attr, read)
            elif field.type.fmt is None or nullable:
                self.steps.append((field.attr, write, read))
            elif self.steps and isinstance(last := self.steps[-1], _Run):
                self.steps[-1] = _Run(
                    (*last.attrs, field.attr),
                    (*last.types, field.type),
                    struct.Struct(last.codec.format + field.type.fmt),
                )
            else:
                self.steps.append(
                    _Run((field.attr,), (field.type,), struct.Struct(">" + field.type.fmt))
                )
        self.tagged.sort(key=lambda entry: entry[0])
        self.read: _Reader = self._compile_read()
        self.write: _Writer = self._compile_write()

    # -- reading -----------------------------------------------------------------------------

    def _compile_read(self) -> _Reader:
        env: dict[str, Any] = {
            "CLS": self.cls,
            "UUID_OF": _uuid_of,
            "READ_TAGGED": self._read_tagged,
            "NAME_ERROR": self._name_read_error,
            "READ_ERROR": self._read_error,
            "DecodeError": DecodeError,
            "Truncated": (struct.error, IndexError, CorruptRecordError),
        }
        body: list[str] = []
        kwargs: list[str] = []
        for index, step in enumerate(self.steps):
            body.append(f"step = {index}")
            if isinstance(step, _Run):
                names = [f"v{len(kwargs) + i}" for i in range(len(step.attrs))]
                env[f"UNPACK{index}"] = step.codec.unpack_from
                body.append(f"{', '.join(names)}, = UNPACK{index}(buf, pos)")
                body.append(f"pos += {step.codec.size}")
                for name, kind in zip(names, step.types, strict=True):
                    if kind is UUID:
                        body.append(f"{name} = UUID_OF({name})")
                kwargs += [f"{a}={n}" for a, n in zip(step.attrs, names, strict=True)]
            else:
                env[f"READ{index}"] = step[2]
                body.append(f"v{len(kwargs)}, pos = READ{index}(buf, pos)")
                kwargs.append(f"{step[0]}=v{len(kwargs)}")
        args = ", ".join(kwargs)
        body += [
            f"step = {len(self.steps)}",
            "if buf[pos] == 0:  # no tagged fields: the common case",
            f"    return CLS({args}), pos + 1",
            "tagged, pos = READ_TAGGED(buf, pos)",
            f"return CLS({args}{', ' if args else ''}**tagged), pos",
        ]
        source = "\n".join(
            [
                "def read(buf, pos):",
                "    step = 0",
                "    try:",
                *(f"        {line}" for line in body),
                "    except DecodeError as exc:",
                "        NAME_ERROR(step, exc)",
                "        raise",
                "    except Truncated as exc:",
                "        raise READ_ERROR(step, buf, pos, exc) from exc",
            ]
        )
        exec(compile(source, f"<metadata codec: read {self.name}>", "exec"), env)
        read: _Reader = env["read"]
        return read

    def _name_read_error(self, step: int, exc: DecodeError) -> None:
        # Only the per-type readers raise DecodeError (a run only raises struct.error), and
        # the tagged fields (the last step) name their own errors.
        if step < len(self.steps):
            current = self.steps[step]
            assert not isinstance(current, _Run)
            exc.path.insert(0, current[0])

    def _read_error(self, step: int, buf: Any, pos: int, exc: Exception) -> DecodeError:
        """The error of a read that failed at ``step`` (``pos``: where the step began)."""
        attr, position = "tagged fields", pos
        if step < len(self.steps):
            current = self.steps[step]
            if isinstance(current, _Run):
                attr = current.attrs[-1]
                for name, kind in zip(current.attrs, current.types, strict=True):
                    size = struct.calcsize(">" + str(kind.fmt))
                    if position + size > len(buf):
                        attr = name  # the first field of the run that is cut
                        break
                    position += size
            else:
                attr = current[0]
        if isinstance(exc, CorruptRecordError):  # from read_uvarint: too long or truncated
            return DecodeError(
                "bad unsigned varint", pos if exc.position is None else exc.position, [attr]
            )
        return DecodeError("truncated", position, [attr])

    def _read_tagged(self, buf: Any, pos: int) -> tuple[dict[str, Any], int]:
        values: dict[str, Any] = {}
        attr = "tagged fields"
        start = pos
        try:
            count, pos = _uvarint(buf, pos)
            for _ in range(count):
                attr = "tagged fields"
                start = pos
                tag, pos = _uvarint(buf, pos)
                size, pos = _uvarint(buf, pos)
                end = pos + size
                if end > len(buf):
                    raise DecodeError(
                        f"tagged field {tag} of {size} bytes runs past the end", start, []
                    )
                known = self.tagged_by_tag.get(tag)
                if known is not None:  # else a tag from a newer schema: skipped, as Kafka does
                    attr, read = known
                    start = pos
                    values[attr], after = read(buf[:end], pos)
                    if after != end:
                        raise DecodeError(
                            f"tagged value of {size} bytes holds {after - pos}", pos, []
                        )
                pos = end
        except DecodeError as exc:
            exc.path.insert(0, attr)
            raise
        except (struct.error, IndexError) as exc:
            raise DecodeError("truncated", start, [attr]) from exc
        except CorruptRecordError as exc:
            position = start if exc.position is None else exc.position
            raise DecodeError("bad unsigned varint", position, [attr]) from exc
        return values, pos

    # -- writing -----------------------------------------------------------------------------

    def _compile_write(self) -> _Writer:
        env: dict[str, Any] = {
            "AT_DEFAULT": _at_default,
            "ABSENT_ERROR": self._absent_error,
            "WRITE_ERROR": self._write_error,
            "WRITE_TAGGED": self._write_tagged,
            "Invalid": (struct.error, AttributeError, TypeError, ValueError),
        }
        checks: list[str] = []
        for index, (attr, default) in enumerate(self.absent):
            env[f"DEFAULT{index}"] = default
            checks += [
                f"if not AT_DEFAULT(m.{attr}, DEFAULT{index}):",
                f"    raise ABSENT_ERROR({attr!r}, DEFAULT{index})",
            ]
        body: list[str] = []
        for index, step in enumerate(self.steps):
            body.append(f"step = {index}")
            if isinstance(step, _Run):
                env[f"PACK{index}"] = step.codec.pack
                values = [
                    f"m.{a}.bytes" if kind is UUID else f"m.{a}"
                    for a, kind in zip(step.attrs, step.types, strict=True)
                ]
                body.append(f"out += PACK{index}({', '.join(values)})")
            else:
                env[f"WRITE{index}"] = step[1]
                body.append(f"WRITE{index}(out, m.{step[0]})")
        source = "\n".join(
            [
                "def write(out, m):",
                *(f"    {line}" for line in checks),
                "    step = 0",
                "    try:",
                *(f"        {line}" for line in body or ["pass"]),
                "    except Invalid as exc:",
                "        raise WRITE_ERROR(step, m, exc) from exc",
                "    WRITE_TAGGED(out, m)",
            ]
        )
        exec(compile(source, f"<metadata codec: write {self.name}>", "exec"), env)
        write: _Writer = env["write"]
        return write

    def _absent_error(self, attr: str, default: Any) -> ValueError:
        return ValueError(f"{self.name} has no field {attr}: it must be at its default {default!r}")

    def _write_error(self, step: int, obj: Any, exc: Exception) -> Exception:
        """The error of a write that failed at ``step``, naming the field."""
        current = self.steps[step]
        if isinstance(current, _Run):
            for attr, kind in zip(current.attrs, current.types, strict=True):
                try:
                    kind.write(bytearray(), getattr(obj, attr))
                except (ValueError, TypeError) as inner:
                    return type(inner)(f"{self.name} {attr}: {inner}")
            return ValueError(f"{self.name}: {exc}")
        attr = current[0]
        kind_of_error = TypeError if isinstance(exc, AttributeError) else type(exc)
        return kind_of_error(f"{self.name} {attr}: {exc}")

    def _write_tagged(self, out: bytearray, obj: Any) -> None:
        tagged: list[tuple[int, bytearray]] = []
        for tag, attr, write, default in self.tagged:
            value = getattr(obj, attr)
            if _at_default(value, default):
                continue
            value_bytes = bytearray()
            try:
                write(value_bytes, value)
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"{self.name} {attr}: {exc}") from exc
            tagged.append((tag, value_bytes))
        out += uvarint_bytes(len(tagged))
        for tag, value_bytes in tagged:
            out += uvarint_bytes(tag)
            out += uvarint_bytes(len(value_bytes))
            out += value_bytes


def _struct_defaults(cls: type[msgspec.Struct]) -> list[Any]:
    # msgspec keeps the defaults of the trailing fields only; with kw_only every field of
    # these structs has one.
    defaults = list(cls.__struct_defaults__)
    assert len(defaults) == len(cls.__struct_fields__), cls
    return defaults


def nested(cls: type[msgspec.Struct], fields: Sequence[Field]) -> _Type:
    """A struct-typed array element: its fields, then its own tagged fields (none known)."""
    plan = Plan(cls, fields, 0)
    return _Type(cls.__name__, plan.write, plan.read)
