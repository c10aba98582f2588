"""The one exception type for mistakes a user can fix, and how a command reports one.

The CLI, and every benchmark run as a script, turns a `UserError` (or a bad flag) into a
single line on stderr and exit code 2; anything else is a bug and keeps its traceback.
What does not stop a command is a single `note:` line on stderr.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click


class UserError(Exception):
    """Bad input from the user: a word, a file, a flag or a config value."""


def fail(message: str) -> NoReturn:
    """One `error:` line on stderr and exit code 2."""
    one_line = " ".join(message.splitlines())  # user text quoted in a message may hold line breaks
    click.echo(f"error: {one_line}", err=True)
    sys.exit(2)


def interrupted(err: BaseException) -> bool:
    """Whether `err` is a Ctrl-C in disguise: a compiled function (numba's) that returns while the
    interrupt is pending raises SystemError ("returned a result with an exception set") from it."""
    if not isinstance(err, SystemError):
        return False
    links = [link for link in (err.__cause__, err.__context__) if link is not None and link is not err]
    # numba can fail again while the first SystemError unwinds: a chain of them ends at the Ctrl-C
    return any(isinstance(link, KeyboardInterrupt) or interrupted(link) for link in links)


def note(message: str) -> None:
    """One `note:` line on stderr for what the user should know but need not fix: a flag that
    has no effect, a count that was capped, a cache that is rebuilt."""
    click.echo(f"note: {' '.join(message.splitlines())}", err=True)


def run_script(command: click.Command) -> None:
    """Run a click command as a `python -m` script under the CLI's contract: a user mistake,
    ours or a bad flag, is one `error:` line and exit code 2, not a traceback or a usage block."""
    try:
        command.main(standalone_mode=False)
    except UserError as err:
        fail(str(err))
    except click.UsageError as err:
        fail(err.format_message())
