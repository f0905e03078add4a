"""Driving a GroupCoordinator directly, as the handlers do, over the real LogManager."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.lowlevel

from trio_broker.config import load_config
from trio_broker.coordinator import GroupCoordinator
from trio_broker.coordinator.group import JoinResult, SyncResult
from trio_broker.storage.manager import LogManager

#: A fixed wall clock origin; tests add trio's (autojumped) time to it.
EPOCH = 1_700_000_000.0

DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}


@attrs.define
class Harness:
    """A coordinator with its own LogManager, started under a nursery."""

    data_dir: Path
    overrides: dict[str, str]
    log_manager: LogManager | None = None
    coordinator: GroupCoordinator | None = None
    scope: trio.CancelScope | None = None

    @property
    def coord(self) -> GroupCoordinator:
        assert self.coordinator is not None
        return self.coordinator

    async def start(self, nursery: trio.Nursery) -> GroupCoordinator:
        config = load_config({"log.dirs": str(self.data_dir), **DEFAULTS, **self.overrides})
        self.log_manager = LogManager(config)
        self.log_manager.open()
        self.coordinator = GroupCoordinator(config, self.log_manager,
                                            wall_clock=lambda: EPOCH + trio.current_time())
        self.scope = trio.CancelScope()
        await nursery.start(self._run)
        return self.coordinator

    async def _run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        assert self.scope is not None and self.coordinator is not None
        with self.scope:
            await self.coordinator.run(task_status=task_status)

    async def stop(self) -> None:
        """Stop the coordinator and close storage (a clean broker shutdown)."""
        assert self.scope is not None and self.log_manager is not None
        self.scope.cancel()
        await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
        self.log_manager.close()

    def create_topic(self, name: str, partitions: int) -> None:
        assert self.log_manager is not None
        self.log_manager.create_topic(name, partitions)

    # -- protocol calls
    async def join(self, group: str = "g", member_id: str = "", *, instance: str | None = None,
                   protocols: Sequence[tuple[str, bytes]] = (("range", b"meta"),),
                   session_ms: int = 10_000, rebalance_ms: int = 30_000,
                   protocol_type: str = "consumer", client_id: str = "client",
                   require_known: bool = True) -> JoinResult:
        pending = self.coord.join_group(
            group_id=group, member_id=member_id, group_instance_id=instance,
            client_id=client_id, client_host="/127.0.0.1", session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type,
            protocols=list(protocols), require_known_member_id=require_known)
        return await pending.wait()

    async def join_new(self, group: str = "g", **kw: Any) -> JoinResult:
        """A new dynamic member: MEMBER_ID_REQUIRED first, then the real join."""
        first = await self.join(group, **kw)
        assert first.error == 79, first  # MEMBER_ID_REQUIRED
        return await self.join(group, first.member_id, **kw)

    async def sync(self, group: str, generation: int, member_id: str,
                   assignments: dict[str, bytes] | None = None,
                   instance: str | None = None) -> SyncResult:
        pending = self.coord.sync_group(
            group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance, protocol_type="consumer", protocol_name=None,
            assignments=assignments or {})
        return await pending.wait()

    def heartbeat(self, group: str, member_id: str, generation: int,
                  instance: str | None = None) -> int:
        return self.coord.heartbeat(group_id=group, member_id=member_id,
                                    group_instance_id=instance, generation_id=generation)


async def gather(*fns: Any) -> list[Any]:
    """Run coroutine functions concurrently; their results in order."""
    results: list[Any] = [None] * len(fns)

    async def run(index: int, fn: Any) -> None:
        results[index] = await fn()

    async with trio.open_nursery() as nursery:
        for index, fn in enumerate(fns):
            nursery.start_soon(run, index, fn)
    return results
