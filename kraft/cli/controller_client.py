"""``ControllerClient``: how the command-line tools (``kraft topics``, ``kraft cluster``,
``kraft broker simulate``) reach the active controller.

The active controller is the Raft leader of the controller quorum (it claims each epoch it
leads). The client sends each request to the controller that answered last; when there is
none yet, or it answers NOT_CONTROLLER, or cannot be reached, it finds the leader afresh with
DescribeQuorum (:class:`~kraft.cli.quorum.LeaderRounds`, as ``kraft quorum`` does) and asks
it, until the timeout. A request whose connection failed after it was sent may still have
been carried out: a write sent again may then meet its own outcome (TOPIC_ALREADY_EXISTS).
"""

from __future__ import annotations

import argparse
import sys

from kraft.cli.quorum import LeaderRounds, add_connection_arguments, connection_settings
from kraft.config import ConfigError, Endpoint
from kraft.errors import TransportError
from kraft.protocol.controller_messages import (
    ControllerRequest,
    ControllerResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribeTopicPartitionsResponse,
    IncrementalAlterConfigsResponse,
)
from kraft.protocol.errors import Errors
from kraft.runtime.request_once import controller_request_once
from kraft.runtime.tls import TlsConfig

__all__ = ["ControllerClient", "add_tool_arguments", "client_from_args", "is_not_controller"]

#: How much longer than a request's own timeout the client waits for its answer.
_ANSWER_MARGIN_S = 2.0


def is_not_controller(response: ControllerResponse) -> bool:
    """Whether ``response`` says the node is not the active controller (at its top level, or
    on every item: a refused CreateTopics names NOT_CONTROLLER on each topic)."""
    match response:
        case CreateTopicsResponse():
            codes = [t.error_code for t in response.topics]
        case DeleteTopicsResponse():
            codes = [t.error_code for t in response.responses]
        case CreatePartitionsResponse():
            codes = [t.error_code for t in response.results]
        case IncrementalAlterConfigsResponse():
            codes = [r.error_code for r in response.responses]
        case DescribeTopicPartitionsResponse() | DescribeConfigsResponse():
            return False  # any node answers them from its image
        case _:
            codes = [response.error_code]
    return bool(codes) and all(code == Errors.NOT_CONTROLLER for code in codes)


class ControllerClient:
    """Sends controller requests to the active controller (see the module docstring)."""

    def __init__(
        self,
        bootstrap: list[Endpoint],
        *,
        cluster_id: str | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._cluster_id = cluster_id
        self._tls = tls
        #: The controller that answered last.
        self.controller: Endpoint | None = None

    def send(self, body: ControllerRequest, timeout_s: float) -> ControllerResponse:
        """The active controller's answer to ``body``. Raises
        :class:`~kraft.errors.TransportError` when no active controller answered within
        ``timeout_s``, saying what went wrong last."""
        if self.controller is not None:
            try:
                response = self._ask(self.controller, body, timeout_s)
            except TransportError:
                response = None
            if response is not None and not is_not_controller(response):
                return response
            self.controller = None
        rounds = LeaderRounds(self._bootstrap, timeout_s, self._cluster_id, self._tls)
        for leader, remaining_s in rounds:
            try:
                response = self._ask(leader, body, remaining_s)
            except TransportError as exc:
                rounds.problem = str(exc)
                continue
            if is_not_controller(response):
                rounds.problem = f"{leader}: NOT_CONTROLLER"
                continue
            self.controller = leader
            return response
        raise TransportError(rounds.gave_up())

    def _ask(
        self, address: Endpoint, body: ControllerRequest, timeout_s: float
    ) -> ControllerResponse:
        return controller_request_once(
            address,
            body,
            cluster_id=self._cluster_id,
            timeout_s=timeout_s + _ANSWER_MARGIN_S,
            tls=self._tls,
        )


def add_tool_arguments(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap`` (controller nodes), ``--cluster-id``, ``--config``, ``--json`` and
    ``--timeout``: what a controller tool takes."""
    add_connection_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds until the active controller must have answered (default 30)",
    )


def client_from_args(args: argparse.Namespace) -> ControllerClient | None:
    """The client :func:`add_tool_arguments` describes; ``None`` (the error printed) for a
    bad ``--bootstrap`` or ``--config``."""
    try:
        bootstrap, tls, cluster_id = connection_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    return ControllerClient(bootstrap, cluster_id=cluster_id, tls=tls)
