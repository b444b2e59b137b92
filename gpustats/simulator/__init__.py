"""A simulated NVML for tests, benchmarks and demos: scenarios in YAML, served below pynvml; the
scenario's AMD and Intel GPUs rendered as sysfs and DRM fdinfo trees (``SimulatedDrm``).

Not a source of data: ``gpustats.sources.nvml`` is the real NVML boundary, and this package
stands in for the C library underneath it, so everything above pynvml runs unchanged; likewise
``SimulatedDrm`` stands in for the kernel's files that ``gpustats.sources.drm`` reads.
"""

from gpustats.simulator.drm import SimulatedDrm
from gpustats.simulator.library import SimulatedNvml
from gpustats.simulator.scenario import Scenario, load_scenario, parse_scenario

__all__ = ["SimulatedDrm", "SimulatedNvml", "Scenario", "load_scenario", "parse_scenario"]
