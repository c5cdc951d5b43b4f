"""A command line is parsed by the parser of its command's module alone, exactly as by the parser of every command."""

from __future__ import annotations

import contextlib
import io

import pytest

from convswap.cli import COMMANDS, build_parser, main


def help_of(parser, words: list[str]) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text, pytest.raises(SystemExit) as exit_:
        parser.parse_args(words)
    assert exit_.value.code == 0
    return text.getvalue()


def test_every_command_has_the_same_help_from_its_module_alone_as_from_every_module():
    everything = build_parser()
    commands = everything._subparsers._group_actions[0].choices
    assert sorted(commands) == sorted(COMMANDS)  # every command is parsed by its own module's parser
    for command, parser in commands.items():
        actions = [name for action in parser._subparsers._group_actions for name in action.choices] if (
            parser._subparsers) else []  # fmt: skip
        for words in ([command, "--help"], *([command, action, "--help"] for action in actions)):
            assert help_of(build_parser(command), words) == help_of(everything, words), words


def test_an_unknown_command_is_refused_with_every_command_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tabels", "runs"])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and "invalid choice: 'tabels'" in error
    assert all(f"'{command}'" in error for command in COMMANDS)
