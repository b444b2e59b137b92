"""``gpustats --demo [kubernetes|bare-metal]``: the daemon on a simulated node with a moving
load, named pods (``load``) or a bare-metal host's Slurm job, service, Docker container and
user's notebook (``bare_metal``), on a fake host made in a temporary directory and removed on
exit."""

from gpustats.demo.node import DemoNode

__all__ = ["DemoNode"]
