"""Every command and every option of ``kraft`` says what it is for in ``--help``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from kraft.cli.main import build_parser


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, str | None]]:
    """``(path, help)`` of each command, option and positional argument under ``parser``
    (argparse's own ``-h`` aside)."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, command in action.choices.items():
                yield f"{path} {name}", helps.get(name)
                yield from _walk(command, f"{path} {name}")
        else:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_command_and_option_has_help_text() -> None:
    walked = dict(_walk(build_parser(), "kraft"))
    # The walk reaches the leaves of every group.
    assert {
        "kraft sim run --scenario",
        "kraft sim replay run_dir",
        "kraft node start --config/-c",
        "kraft quorum describe --bootstrap/-b",
        "kraft storage format",
    } <= set(walked)
    assert [path for path, text in walked.items() if not text or text == argparse.SUPPRESS] == []
