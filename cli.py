#!/usr/bin/env python
"""wordle-rl: teach small language models to play Wordle.

Commands: solve, eval, play, doctor, gen-sft, sft, rl, naming-head, report, pipeline. Each lives in its package's
`commands.py`; this file only wires them together and turns user mistakes into one
line on stderr with exit code 2.
"""

from llm.blas import ensure_fast_blas

ensure_fast_blas()  # before anything imports mlx: may re-exec with a real BLAS preloaded

import click  # noqa: E402

from common.errors import UserError, fail, interrupted  # noqa: E402


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2; 8.1 exits with the help


class _Cli(click.Group):
    """Every user mistake, ours or a bad flag caught by click, ends as one `error:` line and exit 2."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """A bad option before the command (`cli.py --bogus solve`) is one line too, not a usage block."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except _NO_ARGS_IS_HELP:
            raise  # no command at all: the help is the answer
        except click.UsageError as err:
            fail(err.format_message())

    def invoke(self, ctx: click.Context):
        """Also: the environment is checked before any work, and a Ctrl-C that reached us wrapped
        in another exception ends as click ends any Ctrl-C ("Aborted!", exit 1), not a traceback."""
        from common.progress import plain_every

        try:
            plain_every()
            return super().invoke(ctx)
        except UserError as err:
            fail(str(err))
        except click.UsageError as err:
            fail(err.format_message())
        except SystemError as err:
            if interrupted(err):
                raise KeyboardInterrupt from None
            raise


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Teach small language models to play Wordle, with an exact entropy solver as the expert."""


def _register() -> None:
    from eval.commands import eval_command
    from eval.play_command import play_command
    from llm.commands import doctor
    from rl.commands import report_command, rl_command
    from rl.distill_command import distill_command
    from rl.head_command import naming_head_command
    from rl.output_rl_command import output_rl_command
    from rl.pipeline_command import pipeline_command
    from sft.commands import sft
    from sft.export_command import export_command
    from sft.gen_command import gen_sft
    from solver.commands import matrix_command, solve

    for command in (solve, matrix_command, eval_command, play_command, doctor, gen_sft, sft, rl_command,
                    distill_command, output_rl_command, naming_head_command, report_command, pipeline_command, export_command):
        cli.add_command(command)


try:
    _register()
except KeyboardInterrupt:
    # A Ctrl-C while the commands' modules import (mlx, numba, datasets: seconds) ends as click ends
    # any Ctrl-C, not as a traceback through the import machinery.
    click.echo("Aborted!", err=True)
    raise SystemExit(1) from None

if __name__ == "__main__":
    cli()
