"""AMD (amdgpu) and Intel (i915, xe) GPUs, read from the kernel's sysfs and DRM fdinfo.

- ``fdinfo``: one ``/proc/<pid>/fdinfo/<fd>`` text parsed (pure).
- ``clients``: the bounded scan of processes for DRM clients, and their per-tick engine time.
- ``devices``: this vendor's GPUs on the PCI bus, with their DRM nodes.
- ``amdgpu``, ``intel``: each device's sysfs and hwmon values.
- ``sweep``: ``DrmSweeper``, the engine's ``Sweeper`` for one vendor.
"""
