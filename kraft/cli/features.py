"""``kraft features upgrade``: raise a feature level of a running quorum (Kafka's
``kafka-features.sh upgrade``). kraft has one feature, ``kraft.version``.

``kraft features upgrade --feature kraft.version=1 --bootstrap HOST:PORT[,...]`` sends
UpdateFeatures to the leader (found as ``kraft quorum`` finds it). The leader of a static quorum
(``kraft.version`` 0) upgrades it to 1 once every voter has told it its directory id and
listeners (each voter does so, with UpdateRaftVoter, soon after every election): it appends
``KRaftVersionRecord(1)`` and the ``VotersRecord`` of the voters, and answers once they are
committed; from then on the voters live in the log and ``kraft quorum add-controller`` and
``remove-controller`` work. Before every voter has reported, the leader answers
INVALID_UPDATE_VERSION naming those missing; a downgrade is refused with the same error, as in
Kafka. Leader changes, lost connections and REQUEST_TIMED_OUT are retried until ``--timeout``
(kraft.cli.quorum).

Exit status 0 once the level is committed (or was already that), 1 with Kafka's error name
when the upgrade failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kraft.cli.quorum import (
    add_change_arguments,
    add_connection_arguments,
    connection_settings,
    send_change,
)
from kraft.config import ConfigError
from kraft.protocol.api import KRAFT_VERSION_FEATURE
from kraft.protocol.messages import FeatureUpdate, UpdateFeaturesRequest

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft features ...`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "features",
        help="upgrade the quorum's kraft.version",
        description="Change the feature levels of a running quorum (like kafka-features.sh).",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="features commands", metavar="COMMAND")
    upgrade = commands.add_parser(
        "upgrade",
        help="raise a feature level (kraft.version=1: static voters to voters in the log)",
        description="Ask the leader to finalize a higher feature level. kraft.version=1 "
        "turns a static quorum into a dynamic one (KIP-853) once every voter has reported "
        "its directory id and listeners to the leader.",
    )
    add_connection_arguments(upgrade)
    upgrade.add_argument(
        "--feature",
        required=True,
        metavar="NAME=LEVEL",
        help="the feature and the level to finalize: kraft.version=1",
    )
    add_change_arguments(
        upgrade, dry_run_help="ask the leader to validate the upgrade, and change nothing"
    )
    upgrade.set_defaults(handler=_upgrade)


def _feature(text: str) -> tuple[str, int]:
    name, sep, level = text.partition("=")
    name = name.strip()
    if not sep or not level.strip().isdigit():
        raise ConfigError(f"--feature {text!r}: expected NAME=LEVEL, such as kraft.version=1")
    if name != KRAFT_VERSION_FEATURE:
        raise ConfigError(f"--feature {text!r}: kraft has one feature, {KRAFT_VERSION_FEATURE}")
    return name, int(level)


def _upgrade(args: argparse.Namespace) -> int:
    try:
        name, level = _feature(args.feature)
        bootstrap, tls, cluster_id = connection_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def request(remaining_ms: int) -> UpdateFeaturesRequest:
        return UpdateFeaturesRequest(
            feature_updates=(FeatureUpdate(name, level),),
            timeout_ms=remaining_ms,
            validate_only=args.dry_run,
        )

    error = send_change(bootstrap, request, lambda _: False, None, args.timeout, cluster_id, tls)
    if error is not None:
        print(f"error: upgrading {name} to {level} failed: {error}", file=sys.stderr)
        return 1
    print(f"{name} was {'validated for' if args.dry_run else 'upgraded to'} level {level}.")
    return 0
