"""The ``trio_broker`` command's entry point: imports the command line, then runs it.

Kept free of imports so that a Ctrl-C while Python is still importing the command (trio,
attrs, the configuration: the first few hundred milliseconds) ends with one line and the
shell's status for an interrupt, as a Ctrl-C later in start-up does (:func:`trio_broker.cli.main`).
"""

from __future__ import annotations

import sys

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130


def main() -> int:
    """Run ``trio_broker`` with ``sys.argv``; its exit status."""
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("trio_broker: interrupted during start-up", file=sys.stderr)
        return INTERRUPTED
    return cli_main()
