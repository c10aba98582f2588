"""The plumbing every package uses: user errors, careful file reads and writes, progress
bars, run-folder locks, self-checking cache files and the click options every command shares.

It sits below every other package (solver, llm, eval, sft, rl, the CLI, bench, studies)
and imports nothing of the project, so any of them may use it without an upward arrow.
"""
