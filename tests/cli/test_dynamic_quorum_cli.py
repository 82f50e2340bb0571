"""``kraft storage format --standalone | --initial-controllers | --no-initial-controllers`` and
the arguments of ``kraft quorum add-controller`` / ``remove-controller``, run in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.common.uuids import uuid_from_text
from kraft.log.file import FileLog
from kraft.log.meta_properties import (
    CLUSTER_METADATA_DIR,
    random_directory_id,
    read_meta_properties,
)
from kraft.raft.states import ReplicaKey
from kraft.raft.voter_history import VoterHistory
from kraft.raft.voter_set import VoterNode, VoterSet

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
CHECKPOINT = "00000000000000000000-0000000000.checkpoint"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def node_file(tmp_path: Path, node_id: int, *lines: str) -> Path:
    path = tmp_path / f"node{node_id}.toml"
    body = [f"node_id = {node_id}", f'data_dir = "data/{node_id}"', *lines]
    path.write_text("\n".join(body) + "\n")
    return path


def dynamic_file(tmp_path: Path, node_id: int, listen: str = "127.0.0.1:19091") -> Path:
    return node_file(
        tmp_path, node_id, f'listen = "{listen}"', 'bootstrap_servers = "127.0.0.1:19091"'
    )


def history(data_dir: Path) -> VoterHistory:
    """The voters and kraft.version the node will start with, read from its log."""
    log = FileLog.open(data_dir / CLUSTER_METADATA_DIR)
    try:
        voters = VoterHistory(VoterSet({}))
        voters.sync(log)
        return voters
    finally:
        log.close()


def test_standalone_bootstraps_a_quorum_of_this_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dynamic_file(tmp_path, 1)
    code, out, err = run(
        capsys, "storage", "format", "-t", CLUSTER_ID, "--config", str(config), "--standalone"
    )
    assert code == 0, err
    data_dir = tmp_path / "data" / "1"
    assert (data_dir / CLUSTER_METADATA_DIR / CHECKPOINT).is_file()
    meta = read_meta_properties(data_dir)
    assert meta.directory_id is not None and meta.directory_id in out
    voters = history(data_dir)
    assert voters.kraft_version == 1
    assert voters.last_voter_set == VoterSet(
        {
            1: VoterNode(
                ReplicaKey(1, uuid_from_text(meta.directory_id)),
                (("CONTROLLER", "127.0.0.1", 19091),),
                (0, 1),
            )
        }
    )


def test_initial_controllers_give_this_node_its_directory_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directories = [random_directory_id() for _ in range(3)]
    initial = ",".join(f"{i + 1}@127.0.0.1:{19091 + i}:{d}" for i, d in enumerate(directories))
    data_dir = tmp_path / "d2"
    code, _, err = run(
        capsys, "storage", "format", "-t", CLUSTER_ID, "-n", "2", str(data_dir),
        "--initial-controllers", initial,
    )  # fmt: skip
    assert code == 0, err
    assert read_meta_properties(data_dir).directory_id == directories[1]
    voters = history(data_dir)
    assert voters.kraft_version == 1
    assert voters.last_voter_set.keys == tuple(
        ReplicaKey(i + 1, uuid_from_text(d)) for i, d in enumerate(directories)
    )
    assert voters.last_voter_set.endpoints(3) == (("CONTROLLER", "127.0.0.1", 19093),)
    # Formatted again with --ignore-formatted: fine with the same list, not with another id.
    argv = ["storage", "format", "-t", CLUSTER_ID, "-n", "2", str(data_dir), "-g"]
    assert run(capsys, *argv, "--initial-controllers", initial)[0] == 0
    other = initial.replace(directories[1], random_directory_id())
    code, _, err = run(capsys, *argv, "--initial-controllers", other)
    assert code == 1 and f"directory id {directories[1]}" in err


def test_no_initial_controllers_formats_a_node_that_joins_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dynamic_file(tmp_path, 4)
    code, _, err = run(
        capsys, "storage", "format", "-t", CLUSTER_ID, "-c", str(config), "--no-initial-controllers"
    )
    assert code == 0, err
    voters = history(tmp_path / "data" / "4")
    assert voters.kraft_version == 1
    assert voters.last_voter_set_offset is None and len(voters.last_voter_set) == 0


def test_without_the_flags_the_quorum_stays_static(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "d1"
    assert run(capsys, "storage", "format", "-t", CLUSTER_ID, "-n", "1", str(data_dir))[0] == 0
    assert not (data_dir / CLUSTER_METADATA_DIR / CHECKPOINT).exists()
    assert history(data_dir).kraft_version == 0


DIRECTORY = random_directory_id()


@pytest.mark.parametrize(
    ("initial", "says"),
    [
        (f"1@127.0.0.1:9091:{DIRECTORY},2@h:9092", "expected id@host:port:DIRECTORY_ID"),
        (f"x@h:9091:{DIRECTORY}", "id 'x' is not a non-negative integer"),
        ("1@h:9091:not-a-uuid", "is not a Kafka Uuid"),
        ("1@h:9091:AAAAAAAAAAAAAAAAAAAAAA", "is a reserved Uuid"),
        (f"1@h:9091:{DIRECTORY},1@h:9092:{random_directory_id()}", "node id 1 is listed twice"),
        (f"1@h:9091:{DIRECTORY},2@h:9092:{DIRECTORY}", "is also node 1's"),
        (f"1@h:99999:{DIRECTORY}", "port 99999 is outside 1-65535"),
        (",", "none given"),
        (f"2@h:9092:{DIRECTORY}", "node 1 is not one of the initial controllers ([2])"),
    ],
)
def test_bad_initial_controllers_are_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], initial: str, says: str
) -> None:
    data_dir = tmp_path / "d1"
    code, _, err = run(
        capsys, "storage", "format", "-t", CLUSTER_ID, "-n", "1", str(data_dir),
        "--initial-controllers", initial,
    )  # fmt: skip
    assert code == 1 and says in err
    assert not data_dir.exists()


def test_a_dynamic_format_refuses_what_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fmt = ["storage", "format", "-t", CLUSTER_ID]
    static = node_file(tmp_path, 1, 'voters = "1@127.0.0.1:19091"')
    code, _, err = run(capsys, *fmt, "-c", str(static), "--standalone")
    assert code == 1 and "sets `voters`" in err
    code, _, err = run(capsys, *fmt, "-n", "1", str(tmp_path / "d"), "--standalone")
    assert code == 1 and "--standalone needs the node's file" in err
    wildcard = dynamic_file(tmp_path, 2, listen="0.0.0.0:19092")
    code, _, err = run(capsys, *fmt, "-c", str(wildcard), "--standalone")
    assert code == 1 and "no address other nodes can reach" in err
    code, _, err = run(capsys, *fmt, "-c", str(wildcard), "-n", "3", "--no-initial-controllers")
    assert code == 1 and "-n 3 is not the node id" in err
    code, _, err = run(capsys, *fmt, "--no-initial-controllers")
    assert code == 1 and "give the node id (-n) and DIR" in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "d").exists()


def test_add_controller_dry_run_names_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dynamic_file(tmp_path, 4, listen="127.0.0.1:19094")
    argv = ["storage", "format", "-t", CLUSTER_ID, "-c", str(config), "--no-initial-controllers"]
    assert run(capsys, *argv)[0] == 0
    directory_id = read_meta_properties(tmp_path / "data" / "4").directory_id
    code, out, _ = run(
        capsys, "quorum", "add-controller", "-c", str(config), "-b", "127.0.0.1:1", "--dry-run"
    )
    assert code == 0
    assert out == (
        f"DRY RUN of adding controller 4 with directory id {directory_id} and endpoints: "
        "CONTROLLER://127.0.0.1:19094\n"
    )


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--controller-id", "-1", "--controller-directory-id", DIRECTORY], "is negative"),
        (["--controller-id", "1", "--controller-directory-id", "nope"], "is not a Kafka Uuid"),
        (["--controller-id", "1", "--controller-directory-id", DIRECTORY, "-b", "h"], "host:port"),
    ],
)
def test_remove_controller_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], arguments: list[str], says: str
) -> None:
    bootstrap = [] if "-b" in arguments else ["-b", "127.0.0.1:1"]
    code, _, err = run(capsys, "quorum", "remove-controller", *arguments, *bootstrap)
    assert code == 2 and says in err


def test_remove_controller_without_a_leader_fails_after_its_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(
        capsys, "quorum", "remove-controller", "--controller-id", "1",
        "--controller-directory-id", DIRECTORY, "-b", "127.0.0.1:1", "--timeout", "0.2",
    )  # fmt: skip
    assert code == 1
    assert f"removing KRaft controller 1 with directory id {DIRECTORY} failed" in err
    assert "cannot connect to 127.0.0.1:1" in err and "gave up after 0.2 s" in err


@pytest.mark.parametrize(
    ("feature", "says"),
    [
        ("kraft.version", "expected NAME=LEVEL"),
        ("kraft.version=one", "expected NAME=LEVEL"),
        ("=1", "expected NAME=LEVEL"),
    ],
)
def test_features_upgrade_bad_feature_exits_2(
    capsys: pytest.CaptureFixture[str], feature: str, says: str
) -> None:
    code, _, err = run(capsys, "features", "upgrade", "--feature", feature, "-b", "127.0.0.1:1")
    assert code == 2 and says in err
