"""The one exception type for mistakes a user can fix.

The CLI turns a `UserError` into a single line on stderr and exit code 2; anything
else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad input from the user: a word, a file, a flag or a config value."""
