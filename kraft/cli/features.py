"""``kraft features describe | upgrade``: a running quorum's feature levels (Kafka's
``kafka-features.sh``).

``kraft features describe --bootstrap HOST:PORT[,...]`` sends ApiVersions to the active
controller (found as :class:`~kraft.cli.controller_client.ControllerClient` finds it), as
Kafka's ``describeFeatures`` does: a controller node answers with the features it supports
and the finalized levels of its metadata image (``kraft.version`` as its Raft client has it);
a Raft-only node names ``kraft.version``'s range alone. One line per supported feature, in
Kafka's words (``Feature: metadata.version<TAB>SupportedMinVersion: 3.9-IV0<TAB>...``).

``kraft features upgrade --feature NAME=LEVEL [--feature ...] | --metadata VERSION`` sends one
UpdateFeatures. Naming only ``kraft.version``, it goes to the Raft leader (found as ``kraft
quorum`` finds it): the leader of a static quorum (``kraft.version`` 0) upgrades it to 1 once
every voter has told it its directory id and listeners (each voter does so, with
UpdateRaftVoter, soon after every election): it appends ``KRaftVersionRecord(1)`` and the
``VotersRecord`` of the voters, and answers once they are committed; from then on the voters
live in the log and ``kraft quorum add-controller`` and ``remove-controller`` work. Before
every voter has reported, the leader answers INVALID_UPDATE_VERSION naming those missing; a
downgrade is refused with the same error, as in Kafka. Leader changes, lost connections and
REQUEST_TIMED_OUT are retried until ``--timeout`` (kraft.cli.quorum). Naming any other feature
(``--metadata 3.9-IV0`` is ``metadata.version=21``), it goes to the active controller, which
finalizes all of them or none (docs/protocol-wire.md, "UpdateFeatures on a controller node").

Exit status 0 once the levels are committed (or were already those), 1 with Kafka's error
name when the upgrade failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, Final

from kraft.cli.controller_client import ControllerClient, add_tool_arguments, client_from_args
from kraft.cli.quorum import (
    add_change_arguments,
    add_connection_arguments,
    connection_settings,
    send_change,
)
from kraft.cli.topics import error_text
from kraft.config import ConfigError
from kraft.metadata.image import METADATA_VERSION_FEATURE
from kraft.protocol.api import KRAFT_VERSION_FEATURE
from kraft.protocol.errors import Errors
from kraft.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FeatureUpdate,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)

__all__ = ["METADATA_VERSIONS", "metadata_version_level", "register"]

#: Kafka's ``MetadataVersion`` names by feature level (3.0-IV1 is level 1, the first KRaft
#: one; kraft's controller writes 3.9-IV0, level 21).
METADATA_VERSIONS: Final[Mapping[int, str]] = {
    1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", 4: "3.3-IV0", 5: "3.3-IV1", 6: "3.3-IV2",
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
    13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
    19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2",
    25: "4.0-IV3",
}  # fmt: skip


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft features ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "features",
        help="describe and upgrade the feature levels (kraft.version, metadata.version)",
        description="The feature levels of a running quorum (like kafka-features.sh).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="features commands", metavar="COMMAND")
    describe = commands.add_parser(
        "describe",
        help="the supported and finalized level of each feature",
        description="Ask the active controller (ApiVersions) which features it supports and "
        "at which level each is finalized.",
    )
    add_tool_arguments(describe)
    describe.set_defaults(handler=_describe)
    upgrade = commands.add_parser(
        "upgrade",
        help="raise feature levels (kraft.version=1: static voters to voters in the log)",
        description="Finalize higher feature levels. kraft.version=1, alone, goes to the "
        "Raft leader and turns a static quorum into a dynamic one (KIP-853) once every voter "
        "has reported its directory id and listeners to the leader; other features go to the "
        "active controller.",
    )
    add_connection_arguments(upgrade)
    upgrade.add_argument(
        "--feature",
        action="append",
        default=[],
        metavar="NAME=LEVEL",
        help="a feature and the level to finalize, such as kraft.version=1 (repeatable)",
    )
    upgrade.add_argument(
        "--metadata",
        metavar="VERSION",
        help="the metadata.version to finalize, such as 3.9-IV0 or 3.9",
    )
    add_change_arguments(upgrade, dry_run_help="validate the upgrade, and change nothing")
    upgrade.set_defaults(handler=_upgrade)


def metadata_version_level(version: str) -> int:
    """The level of ``version`` (Kafka's ``MetadataVersion.fromVersionString``: "3.9-IV0",
    or "3.9" for the last of 3.9). Raises :class:`~kraft.config.ConfigError`."""
    for level, name in sorted(METADATA_VERSIONS.items(), reverse=True):
        if version in (name, name.partition("-")[0]):
            return level
    supported = ", ".join(METADATA_VERSIONS.values())
    raise ConfigError(
        f"unknown metadata.version {version}. Supported metadata.version are {supported}"
    )


def _level_text(feature: str, level: int) -> str:
    """Kafka's ``FeatureCommand.levelToString``."""
    if feature != METADATA_VERSION_FEATURE:
        return str(level)
    return METADATA_VERSIONS.get(level, f"UNKNOWN {level}")


def _describe(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if client is None:
        return 2
    answer = client.send(ApiVersionsRequest(), args.timeout)  # KraftError: exits 1
    assert isinstance(answer, ApiVersionsResponse)
    if answer.error_code != Errors.NONE:
        print(f"error: ApiVersions: {error_text(answer.error_code, None)}", file=sys.stderr)
        return 1
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    # Kafka's FinalizedFeaturesEpoch; none when the node finalizes nothing (a Raft-only node).
    epoch = answer.finalized_features_epoch if answer.finalized_features else None
    features = sorted(answer.supported_features, key=lambda f: f.name)
    if args.json:
        rows = [
            {
                "feature": f.name,
                "supported_min": f.min_version,
                "supported_max": f.max_version,
                "finalized": finalized.get(f.name, 0),
                "epoch": epoch,
            }
            for f in features
        ]
        print(json.dumps({"features": rows}))
        return 0
    for f in features:
        print(
            f"Feature: {f.name}\t"
            f"SupportedMinVersion: {_level_text(f.name, f.min_version)}\t"
            f"SupportedMaxVersion: {_level_text(f.name, f.max_version)}\t"
            f"FinalizedVersionLevel: {_level_text(f.name, finalized.get(f.name, 0))}\t"
            f"Epoch: {'-' if epoch is None else epoch}"
        )
    return 0


def _updates(args: argparse.Namespace) -> dict[str, int]:
    """The levels ``--feature`` and ``--metadata`` ask for; :class:`ConfigError`."""
    updates: dict[str, int] = {}
    if args.metadata is not None:
        updates[METADATA_VERSION_FEATURE] = metadata_version_level(args.metadata)
    for text in args.feature:
        name, sep, level = text.partition("=")
        name = name.strip()
        if not sep or not name or not level.strip().isdigit():
            raise ConfigError(f"--feature {text!r}: expected NAME=LEVEL, such as kraft.version=1")
        if name in updates:
            raise ConfigError(f"feature {name} was specified more than once")
        updates[name] = int(level)
    if not updates:
        raise ConfigError("give --feature NAME=LEVEL or --metadata VERSION")
    return updates


def _upgrade(args: argparse.Namespace) -> int:
    try:
        updates = _updates(args)
        bootstrap, tls, cluster_id = connection_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def request(remaining_ms: int) -> UpdateFeaturesRequest:
        return UpdateFeaturesRequest(
            feature_updates=tuple(FeatureUpdate(n, level) for n, level in updates.items()),
            timeout_ms=remaining_ms,
            validate_only=args.dry_run,
        )

    if set(updates) == {KRAFT_VERSION_FEATURE}:
        error = send_change(
            bootstrap, request, lambda _: False, None, args.timeout, cluster_id, tls
        )
    else:
        client = ControllerClient(bootstrap, cluster_id=cluster_id, tls=tls)
        answer = client.send(request(int(args.timeout * 1000)), args.timeout)
        assert isinstance(answer, UpdateFeaturesResponse)
        failed = answer.error_code != Errors.NONE
        error = error_text(answer.error_code, answer.error_message) if failed else None
    named = ", ".join(f"{n} to {level}" for n, level in updates.items())
    if error is not None:
        print(f"error: upgrading {named} failed: {error}", file=sys.stderr)
        return 1
    for name, level in updates.items():
        print(f"{name} was {'validated for' if args.dry_run else 'upgraded to'} level {level}.")
    return 0
