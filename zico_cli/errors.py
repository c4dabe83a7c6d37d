"""The ``zico`` command's exit statuses and its one error type.

``zico logs -f`` (and ``zico status --wait``) exit with the job's outcome: 0 succeeded, 1 failed,
3 cancelled. 2 is a usage error (click's own), 4 any other error: no server, a refused token, a 4xx
or 5xx answer (its message printed).
"""
from __future__ import annotations

import click

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED, EXIT_ERROR = 0, 1, 2, 3, 4
JOB_EXIT = {"succeeded": EXIT_SUCCEEDED, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}


class CliError(click.ClickException):
    """A clear one-line failure: ``zico: error: <message>`` on stderr, exit status 4."""

    exit_code = EXIT_ERROR

    def show(self, file=None):
        click.echo(f"zico: error: {self.format_message()}", err=True)
