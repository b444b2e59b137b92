"""Shared fakes and helpers for the tests (no test lives here; fixtures stay in conftest.py).

Paths and the daemon:
- ``paths``: the repository root and the test tools.
- ``daemon``: the real daemon in a subprocess, free ports, plain and timed HTTP GETs.
- ``simulated``: the real daemon started on a scenario file over a fake host tree.
- ``billing``: what the billing end-to-end modules share (start-up, scrape, a series' value,
  a cgroup v1 host).
- ``hostile``: what the hostile-input modules share (one busy GPU's daemon on a fake host).
- ``descriptors``: this process's open file descriptors, for leak checks.
- ``clock``: a clock that tests move by hand.

Fake hosts, GPUs and peers:
- ``fakehost``: fake cgroup v2, /proc (MIG capability files too) and sysfs trees, scenario
  files, metric look-ups.
- ``kubelet_logs``: the kubelet's log layout as a fake host tree.
- ``gpus``: the GPU UUIDs tests share and a scenario device entry to build on.
- ``tracker_fakes``: fake mapping sources for the container tracker, identities, readings.
- ``sweepers``: the device sweep over the simulated driver on a hand-moved clock.
- ``housekeeper_fakes``: the housekeeper's sources for ticks a test drives (scripted GPUs).
- ``grpc_servers``: a fake gRPC peer on a unix socket, started.
- ``fakeruntime``: a CRI runtime on a unix socket that names containers.
- ``podresources``: pod-resources responses as older kubelets send them.
- ``dcgm_exporter``: a fake dcgm-exporter on loopback.
- ``documents``: hostile YAML documents (an alias bomb).

Expected output and real tools:
- ``invariants``: billing invariants checked on scraped expositions.
- ``tenant_series``: tenant series on an exposition, billed by a scenario's SM shares.
- ``snapshots``: a hand-built snapshot exercising every part of the exposition.
- ``dcgm_snapshot``: a two-GPU snapshot (one in MIG mode) for the dcgm-exporter vocabulary.
- ``prometheus``: a real Prometheus server scraping the daemon.
- ``servicemonitor``: the ServiceMonitor rendered as the Prometheus Operator renders it.
- ``kubelet_go``: the kubelet's Go types, as a decoder fixture.
- ``browser``: a real headless Chromium (or a skip saying why not).
- ``nvidia_smi``: nvidia-smi's own answers, for the real-GPU checks.
- ``image_build``, ``oci_images``: the container image and tiny busybox images.
"""
