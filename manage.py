#!/usr/bin/env python
"""Django's command-line entry point for Zico (settings: zico.settings)."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.settings")
    if sys.argv[1:2] == ["curve"]:  # reads no database and no app: runs without django.setup() (see there)
        from zico.jobs.management.commands.curve import run_without_apps

        run_without_apps(sys.argv)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
