"""The subcommands beside the daemon: ``gpustats usage`` and ``gpustats top``."""

from __future__ import annotations

from typing import Sequence

SUBCOMMANDS = ("usage", "top")


def run_subcommand(argv: Sequence[str]) -> int:
    """Run ``argv[0]`` (one of ``SUBCOMMANDS``) with the rest of ``argv``; its exit code."""
    if argv[0] == "usage":
        from gpustats.commands.usage import main as usage_main
        return usage_main(argv[1:])
    from gpustats.commands.top import main as top_main
    return top_main(argv[1:])
