"""AMD (amdgpu) and Intel (i915, xe) GPUs, read from the kernel's sysfs and DRM fdinfo.

- ``fdinfo``: one ``/proc/<pid>/fdinfo/<fd>`` text parsed (pure).
- ``debugfs``, ``listing``: the kernel's list of each device's clients, parsed and read.
- ``clients``: the processes read for DRM clients (those the kernel lists, else the bounded
  scan), and each client's per-tick engine time; ``fd_walk``: one process's DRM files,
  ``budget``: what a tick may spend, ``owners``: whose a shared client is.
- ``engine_bounds``: a device's engine time bounded by the tick, and the work its clients seen
  do not account for.
- ``devices``: this vendor's GPUs on the PCI bus, with their DRM nodes.
- ``amdgpu``, ``intel``: each device's sysfs and hwmon values; ``gt_idle``: Intel's duty cycle
  from its GTs' idle residency.
- ``sweep``: ``DrmSweeper``, the engine's ``Sweeper`` for one vendor.
"""
