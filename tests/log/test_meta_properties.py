"""meta.properties, Kafka Uuids and storage formatting."""

from __future__ import annotations

import os
import random
import re
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.fsutil import write_atomically
from kraft.common.uuids import ONE_UUID, ZERO_UUID, uuid_from_text, uuid_to_text
from kraft.errors import AlreadyFormattedError, MetaPropertiesError, StorageError
from kraft.log.meta_properties import (
    CLUSTER_METADATA_DIR,
    MetaProperties,
    format_storage,
    is_formatted,
    parse_properties,
    random_directory_id,
    random_uuid,
    read_meta_properties,
    render_properties,
    write_meta_properties,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # the example id of Kafka's quickstart
DIR_ID = "J8aAPcfLQt2bqs1JT_rMgQ"
UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


# -- Uuids -------------------------------------------------------------------------------------


def test_random_uuid_format() -> None:
    seen = set()
    for _ in range(2000):
        u = random_uuid()
        assert UUID_TEXT.fullmatch(u), u
        assert not u.startswith("-")
        assert u not in (uuid_to_text(ZERO_UUID), uuid_to_text(ONE_UUID))
        raw = uuid_from_text(u).bytes
        assert len(raw) == 16
        assert raw[6] >> 4 == 4 and raw[8] >> 6 == 0b10  # version 4, IETF variant, as Java's
        seen.add(u)
    assert len(seen) == 2000


def test_random_uuid_with_a_seeded_rng_is_deterministic() -> None:
    assert random_uuid(random.Random(7)) == random_uuid(random.Random(7))
    assert random_directory_id(random.Random(7)) == random_directory_id(random.Random(7))
    assert random_uuid(random.Random(7)) != random_uuid(random.Random(8))


class ScriptedRandom(random.Random):
    """Returns the given 128-bit values from getrandbits, in order."""

    def __init__(self, values: list[int]) -> None:
        super().__init__(0)
        self.values = values
        self.calls = 0

    def getrandbits(self, k: int) -> int:
        self.calls += 1
        return self.values.pop(0)


def test_random_uuid_redraws_a_uuid_starting_with_a_dash() -> None:
    dash_first = 62 << 122  # the first base64 character encodes the top 6 bits: 62 is '-'
    assert uuid_to_text(uuid.UUID(int=dash_first)).startswith("-")
    rng = ScriptedRandom([dash_first, 1 << 100])
    assert not random_uuid(rng).startswith("-")
    assert rng.calls == 2


# -- the properties format ---------------------------------------------------------------------


def test_parse_java_properties() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "\n"
        "a=1\n"
        "  b : 2\n"
        "c 3\n"
        "d=x\\=y\\:z\\\\\n"
        "e=long \\\n"
        "    value\n"
        "f=\\u0041\\t\n"
        "g=\n"
        "a=last wins\n"
    )
    assert parse_properties(text) == {
        "a": "last wins",
        "b": "2",
        "c": "3",
        "d": "x=y:z\\",
        "e": "long value",
        "f": "A\t",
        "g": "",
    }


def test_parse_rejects_a_bad_unicode_escape() -> None:
    with pytest.raises(ValueError):
        parse_properties("a=\\u00zz\n")


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_render_then_parse_round_trips(props: dict[str, str]) -> None:
    assert parse_properties(render_properties(props, "a comment\nover two lines")) == props


# -- MetaProperties ----------------------------------------------------------------------------


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    meta = MetaProperties(CLUSTER_ID, 3, DIR_ID)
    path = write_meta_properties(tmp_path, meta, comment="Thu Aug 01 10:00:00 UTC 2024")
    assert path == tmp_path / "meta.properties"
    text = path.read_text()
    assert text.startswith("#Thu Aug 01 10:00:00 UTC 2024\n")
    assert parse_properties(text) == {
        "version": "1",
        "cluster.id": CLUSTER_ID,
        "node.id": "3",
        "directory.id": DIR_ID,
    }
    assert read_meta_properties(tmp_path) == meta
    assert os.listdir(tmp_path) == ["meta.properties"]


def test_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Thu Aug 01 10:00:00 UTC 2024\n"
        f"node.id=1\ndirectory.id={DIR_ID}\nversion=1\ncluster.id={CLUSTER_ID}\n"
    )
    assert read_meta_properties(tmp_path) == MetaProperties(CLUSTER_ID, 1, DIR_ID, 1)


def test_directory_id_is_optional(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=0\n")
    assert read_meta_properties(tmp_path) == MetaProperties(CLUSTER_ID, 0)


def test_missing_file_is_a_meta_properties_error(tmp_path: Path) -> None:
    with pytest.raises(MetaPropertiesError, match="not formatted") as info:
        read_meta_properties(tmp_path)
    assert str(tmp_path / "meta.properties") in str(info.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (f"cluster.id={CLUSTER_ID}\nnode.id=1\n", "version is missing"),
        ("version=1\nnode.id=1\n", "cluster.id is missing"),
        (f"version=1\ncluster.id={CLUSTER_ID}\n", "node.id is missing"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=one\n", "node.id 'one'"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=1.5\n", "base-10"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=-1\n", "node.id -1"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=99999999999\n", "int32"),
        (f"version=x\ncluster.id={CLUSTER_ID}\nnode.id=1\n", "version 'x'"),
        (f"version=0\ncluster.id={CLUSTER_ID}\nbroker.id=1\nnode.id=1\n", "version 0"),
        ("version=1\ncluster.id=\nnode.id=1\n", "cluster.id is empty"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=1\ndirectory.id=nope\n", "directory.id"),
        ("version=1\ncluster.id=\\u12\n", "escape"),
    ],
)
def test_malformed_meta_properties(tmp_path: Path, content: str, reason: str) -> None:
    (tmp_path / "meta.properties").write_text(content)
    with pytest.raises(MetaPropertiesError, match=re.escape(reason)) as info:
        read_meta_properties(tmp_path)
    assert str(tmp_path / "meta.properties") in str(info.value)


def test_undecodable_file(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_bytes(b"version=\xff\n")
    with pytest.raises(MetaPropertiesError, match="cannot read"):
        read_meta_properties(tmp_path)


def test_verify() -> None:
    meta = MetaProperties(CLUSTER_ID, 1, DIR_ID)
    meta.verify(cluster_id=CLUSTER_ID, node_id=1)
    meta.verify()
    with pytest.raises(MetaPropertiesError, match="cluster"):
        meta.verify(cluster_id=DIR_ID)
    with pytest.raises(MetaPropertiesError, match="node 1, not node 2"):
        meta.verify(node_id=2)


# -- formatting --------------------------------------------------------------------------------


def test_format_storage(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b"
    meta = format_storage(data_dir, CLUSTER_ID, 2)
    assert (data_dir / CLUSTER_METADATA_DIR).is_dir()
    assert is_formatted(data_dir)
    assert meta.cluster_id == CLUSTER_ID and meta.node_id == 2 and meta.version == 1
    assert meta.directory_id is not None and uuid_from_text(meta.directory_id)
    assert read_meta_properties(data_dir) == meta
    assert sorted(os.listdir(data_dir)) == [CLUSTER_METADATA_DIR, "meta.properties"]


def test_format_gives_every_directory_its_own_id(tmp_path: Path) -> None:
    one = format_storage(tmp_path / "1", CLUSTER_ID, 1)
    two = format_storage(tmp_path / "2", CLUSTER_ID, 1)
    assert one.directory_id != two.directory_id


def test_format_refuses_a_formatted_directory(tmp_path: Path) -> None:
    format_storage(tmp_path, CLUSTER_ID, 1)
    before = (tmp_path / "meta.properties").read_bytes()
    with pytest.raises(AlreadyFormattedError, match="already formatted"):
        format_storage(tmp_path, CLUSTER_ID, 1)
    assert (tmp_path / "meta.properties").read_bytes() == before


def test_a_leftover_tmp_is_not_formatted(tmp_path: Path) -> None:
    (tmp_path / "meta.properties.tmp").write_text("version=1\n")
    assert not is_formatted(tmp_path)
    format_storage(tmp_path, CLUSTER_ID, 1)
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_format_formats_an_existing_unformatted_directory(tmp_path: Path) -> None:
    (tmp_path / CLUSTER_METADATA_DIR).mkdir()
    format_storage(tmp_path, CLUSTER_ID, 0)
    assert is_formatted(tmp_path)


@pytest.mark.parametrize(("cluster_id", "node_id"), [("my-cluster", 1), (CLUSTER_ID, -1)])
def test_format_rejects_bad_ids(tmp_path: Path, cluster_id: str, node_id: int) -> None:
    with pytest.raises(MetaPropertiesError):
        format_storage(tmp_path / "d", cluster_id, node_id)
    assert not (tmp_path / "d" / "meta.properties").exists()


def test_format_on_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(StorageError, match="cannot create"):
        format_storage(tmp_path / "f", CLUSTER_ID, 1)


# -- crash-safe writes -------------------------------------------------------------------------


def test_write_atomically_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    (tmp_path / "x.tmp").write_bytes(b"stale")
    write_atomically(tmp_path / "x", b"new")
    assert kinds == ["file", "dir"]
    assert (tmp_path / "x").read_bytes() == b"new"
    assert not (tmp_path / "x.tmp").exists()
