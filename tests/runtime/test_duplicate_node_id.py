"""A second process started with a node id already in use: the peers answer it as if it were
the replica they follow, naming it leader of an epoch it never led. It says so in one error
line a minute, naming the node id, instead of one per answer."""

from __future__ import annotations

import logging

import pytest

from kraft.raft.client import DUPLICATE_NODE_ID_LOG_INTERVAL_MS
from kraft.testing import RaftClientBuilder, RaftTestContext

LOCAL = 1


def _named_leader_by_peers(ctx: RaftTestContext[bytes], times: int) -> None:
    """Peers tell the local node, ``times`` times, that it leads epoch 1 (as they tell the
    other process with its id that really does)."""
    for peer in (2, 3) * (times // 2):
        ctx.deliver_request(ctx.begin_epoch_request(1, LOCAL), source=peer)
        ctx.poll()
        ctx.advance(10)


def test_a_duplicate_node_id_is_named_in_one_error_line_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx: RaftTestContext[bytes] = RaftClientBuilder(LOCAL, [1, 2, 3]).build()
    with caplog.at_level(logging.ERROR, logger="kraft.raft.client"):
        _named_leader_by_peers(ctx, 400)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "another replica uses node id 1" in errors[0]
        assert "second process running with node id 1" in errors[0]
        assert ctx.role != "Leader" and ctx.epoch == 0  # the claim is refused

        ctx.advance(DUPLICATE_NODE_ID_LOG_INTERVAL_MS)
        _named_leader_by_peers(ctx, 2)
        assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2
