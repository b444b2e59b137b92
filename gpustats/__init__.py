"""gpustats: GPU container-stats sidecar."""

__version__ = "0.1.0"
