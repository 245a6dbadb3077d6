"""The one exception type for input the checker cannot read (exit code 2)."""

from __future__ import annotations


class InputError(Exception):
    """A file, flag or value the checker cannot use at all.

    Rendered as one line, ``<where>: <what is wrong>``, never as a traceback.
    ``where`` names the file (and line) or the command-line argument.
    """

    def __init__(self, where: str, problem: str, line: int | None = None) -> None:
        self.where = where
        self.problem = " ".join(problem.split())  # always one line, whatever the underlying library said
        self.line = line
        super().__init__(self.render())

    def render(self) -> str:
        location = f"{self.where}:{self.line}" if self.line is not None else self.where
        return f"{location}: {self.problem}"
