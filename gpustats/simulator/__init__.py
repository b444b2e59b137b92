"""A simulated NVML for tests, benchmarks and demos: scenarios in YAML, served below pynvml.

Not a source of data: ``gpustats.sources.nvml`` is the real NVML boundary, and this package
stands in for the C library underneath it, so everything above pynvml runs unchanged.
"""

from gpustats.simulator.library import SimulatedNvml
from gpustats.simulator.scenario import Scenario, load_scenario, parse_scenario

__all__ = ["SimulatedNvml", "Scenario", "load_scenario", "parse_scenario"]
