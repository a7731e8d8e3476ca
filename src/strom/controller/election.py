"""The controller's office: who holds ``/controller`` and at which epoch.

Every broker tries to take the office; one atomic multi-operation both creates the ephemeral
``/controller`` (``{"version": 1, "brokerid": N, "timestamp": …}``) and bumps
``/controller_epoch`` with a conditional set on the version just read, as Kafka's
``registerControllerAndIncrementControllerEpoch`` does. So the office and the epoch change
together or not at all, and two brokers can never both win the same epoch. ``/controller_epoch``
is created at ``"0"`` the first time (the first controller's epoch is then 1).

The winner keeps the epoch and the version its set gave ``/controller_epoch``: every later
partition-state write checks that version in the same multi, so a controller that lost the
office (a newer one bumped the epoch) can change nothing. The losers watch ``/controller`` and
try again when it goes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from strom.metadata.store import (
    CreateOp,
    MetadataStore,
    MultiError,
    NodeExistsError,
    NoNodeError,
    SetOp,
    WatchCallback,
)
from strom.metadata.zk_model import (
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    ControllerRegistration,
    controller_epoch_from_bytes,
    controller_epoch_to_bytes,
)


@dataclass(frozen=True, slots=True)
class Office:
    """A won election: the epoch, and ``/controller_epoch``'s version that fences writes."""

    epoch: int
    epoch_version: int


async def active_controller(store: MetadataStore, watch: WatchCallback | None = None) -> int | None:
    """The broker id in ``/controller``, or None; ``watch`` fires at its next change."""
    try:
        data, _ = await store.get(CONTROLLER_PATH, watch=watch)
    except NoNodeError:
        return None
    try:
        return ControllerRegistration.from_json(data).broker_id
    except (ValueError, KeyError):
        return None


async def read_epoch(store: MetadataStore) -> tuple[int, int]:
    """(epoch, node version) of ``/controller_epoch``, created at 0 if absent."""
    try:
        data, stat = await store.get(CONTROLLER_EPOCH_PATH)
    except NoNodeError:
        with contextlib.suppress(NodeExistsError):
            await store.create(CONTROLLER_EPOCH_PATH, controller_epoch_to_bytes(0))
        data, stat = await store.get(CONTROLLER_EPOCH_PATH)
    return controller_epoch_from_bytes(data), stat.version


async def try_elect(store: MetadataStore, broker_id: int) -> Office | None:
    """Take the office for ``broker_id`` if it is free; None if another broker holds it or won
    the race. Raises the store's errors (a lost session) to the caller."""
    if await active_controller(store) is not None:
        return None
    epoch, version = await read_epoch(store)
    registration = ControllerRegistration(broker_id).to_json()
    try:
        stats = await store.multi([
            CreateOp(CONTROLLER_PATH, registration, ephemeral=True),
            SetOp(CONTROLLER_EPOCH_PATH, controller_epoch_to_bytes(epoch + 1), version),
        ])  # fmt: skip
    except MultiError:
        return None  # another broker created /controller or bumped the epoch first
    epoch_stat = stats[1]
    assert epoch_stat is not None
    return Office(epoch + 1, epoch_stat.version)


async def resign(store: MetadataStore, broker_id: int) -> None:
    """Give the office up (delete ``/controller`` if it is still ours); errors are ignored."""
    with contextlib.suppress(Exception):
        data, stat = await store.get(CONTROLLER_PATH)
        if (ControllerRegistration.from_json(data).broker_id == broker_id
                and stat.ephemeral_owner == store.session_id):  # fmt: skip
            await store.delete(CONTROLLER_PATH, stat.version)
