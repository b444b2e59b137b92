"""NVSentinel's GpuService messages and stubs, generated from ``nvsentinel_gpu.proto``."""
