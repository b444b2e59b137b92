"""Whose a tenant is: the UID its cgroup names, else its GPU processes' UID where they agree,
with the user's name from the host's passwd: a service and a container outside pods are
someone's too, so a per-user bill keeps them."""

from __future__ import annotations

from gpustats import fakehost
from gpustats.engine.gpu_mapping import GpuIndex, TenantOwner, TickMapping
from gpustats.engine.mapping_processes import ProcessMapping
from gpustats.model.device import ProcessReading
from gpustats.sources.procs import ProcessIdentity, owner_from
from tests.support.tracker_fakes import reading

GPU = "GPU-00000000-0000-4000-8000-0000000000a1"
USERS = {998: "vllm", 1002: "grace"}
DOCKER = fakehost.container_id(0xD0C)
POD_PATH = "/" + fakehost.container_cgroup(fakehost.pod_uid(1), fakehost.container_id(1))


class Procs:
    def __init__(self, table: dict[int, tuple[str, int | None]]):
        self._table = table

    def cgroup_bytes(self, pid):
        return f"0::{self._table[pid][0]}\n".encode()

    def owner_of(self, pid):
        path, uid = self._table[pid]
        return owner_from({"": path}, ProcessIdentity("x", uid))


class Users:
    def name(self, uid):
        return USERS.get(uid)


def _owners(table: dict[int, tuple[str, int | None]]) -> dict[str, TenantOwner]:
    readings = (reading(GPU, 0, [ProcessReading(pid) for pid in table]),)
    tick = TickMapping(readings, {}, GpuIndex.of(readings), {})
    ProcessMapping(Procs(table), Users()).map(tick)
    return tick.tenant_users


def test_a_service_and_a_container_are_their_processes_users():
    owners = _owners({
        1: ("/" + fakehost.service_cgroup("vllm.service"), 998),
        2: ("/" + fakehost.service_cgroup("vllm.service"), 998),
        3: ("/" + fakehost.docker_cgroup(DOCKER), 1500),        # a UID passwd does not name
        4: ("/" + fakehost.session_cgroup(1002, "4"), 1002),
    })
    assert owners == {"service:vllm.service": TenantOwner(998, "vllm"),
                      DOCKER: TenantOwner(1500, None), "session:1002": TenantOwner(1002, "grace")}


def test_processes_of_several_users_leave_the_tenant_no_one_owner():
    owners = _owners({1: ("/" + fakehost.service_cgroup("shared.service"), 998),
                      2: ("/" + fakehost.service_cgroup("shared.service"), 1002),
                      3: ("/" + fakehost.service_cgroup("anon.service"), None)})
    assert owners == {}


def test_a_session_is_the_user_its_cgroup_names_whoever_runs_in_it():
    """A process of another UID inside a user's session (su, a setuid helper) does not make
    the session someone else's."""
    owners = _owners({1: ("/" + fakehost.session_cgroup(1002, "4"), 0)})
    assert owners == {"session:1002": TenantOwner(1002, None)}


def test_a_pods_container_is_billed_by_its_namespace_not_a_user():
    assert _owners({1: (POD_PATH, 1000)}) == {}
