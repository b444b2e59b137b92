"""Shared fakes and helpers for the tests (no test lives here).

- ``clock``: a clock that tests move by hand.
- ``fakehost``: fake cgroup v2, /proc (MIG capabilities too) and sysfs trees, scenario files,
  metric look-ups.
- ``kubelet_logs``: the kubelet's log layout as a fake host tree.
- ``gpus``: the GPU UUIDs tests share and a scenario device entry to build on.
- ``fakeruntime``: a CRI runtime on a unix socket that names containers.
- ``invariants``: billing invariants checked on scraped expositions.
- ``snapshots``: a hand-built snapshot exercising every part of the exposition.
- ``prometheus``: a real Prometheus server scraping the daemon.
- ``image_build``, ``oci_images``: the container image and tiny busybox images.
- ``kubelet_go``: the kubelet's Go types, as a decoder fixture.
- ``daemon``: the real daemon in a subprocess, free ports, plain HTTP GETs.
- ``simulated``: the real daemon started on a scenario file over a fake host tree.
- ``billing``: what the billing end-to-end modules share (start-up, scrape, series value, cgroup v1 host).
- ``hostile``: what the hostile-input modules share (one busy GPU's daemon on a fake host).
- ``documents``: hostile YAML documents (an alias bomb).
- ``browser``: a real headless Chromium (or a skip saying why not).
- ``servicemonitor``: the ServiceMonitor rendered as the Prometheus Operator renders it.
- ``dcgm_exporter``: a fake dcgm-exporter on loopback.
- ``dcgm_snapshot``: a two-GPU snapshot (one in MIG mode) for the dcgm-exporter vocabulary.
- ``tracker_fakes``: fake mapping sources for the container tracker, identities, readings.
- ``podresources``: pod-resources responses as older kubelets send them.
- ``nvidia_smi``: nvidia-smi's own answers, for the real-GPU checks.
- ``paths``: the repository root and the test tools.
- ``descriptors``: this process's open file descriptors, for leak checks.
"""
