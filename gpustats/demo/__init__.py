"""``gpustats --demo``: the daemon on a simulated node with named pods and a moving load, on a
fake host made in a temporary directory and removed on exit."""

from gpustats.demo.node import DemoNode

__all__ = ["DemoNode"]
