"""What the page's tables show of a tenant beside its name: for a pod, its namespace and the
container; for every other kind, whose it is (the user, else the UID) and the identity its kind
has (a job's step, a container's short ID, a session's or process's UID), never an empty pod
column. Raw names here; the page shows them by ``export.text``'s rule."""

from __future__ import annotations

from gpustats.export.tenants import entry_identity
from gpustats.model.snapshot import ContainerStats
from gpustats.model.tenants import KIND_CONTAINER, KIND_JOB

SHORT_ID = 12


def owner_text(entry: ContainerStats) -> str | None:
    """Whose a tenant outside pods is: the user's name, else ``uid N``; ``None``: unknown."""
    ident = entry_identity(entry)
    if ident.user:
        return ident.user
    return f"uid {ident.uid}" if ident.uid is not None else None


def detail_text(entry: ContainerStats) -> tuple[str | None, bool]:
    """(the kind's own identity not already in the tenant's name, whether it is an ID): a
    job's step, a container's short ID, the UID of a session or process named by user."""
    ident = entry_identity(entry)
    if ident.kind == KIND_JOB:
        return (f"step {ident.step}" if ident.step else None), False
    if ident.kind == KIND_CONTAINER:
        cid = ident.container_id or entry.container_id
        return cid[:SHORT_ID], True
    if ident.uid is not None and ident.user:
        return f"uid {ident.uid}", False
    return None, False
