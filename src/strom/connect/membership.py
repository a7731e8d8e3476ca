"""A Connect worker's membership in its group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

A small blocking client over strom's own codec (``strom.protocol.messages`` + ``kio``), for
protocol type ``connect`` only: it finds the coordinator (FindCoordinator), joins with the
two-step member id handshake (MEMBER_ID_REQUIRED), syncs, heartbeats and leaves. The leader's
assignment is computed by the caller between :meth:`GroupMember.join` and
:meth:`GroupMember.sync`. Not a Kafka client: no metadata, no data; records go through
confluent-kafka. Join/sync and heartbeats use separate connections, since the broker answers
one request at a time per connection and a JoinGroup may wait a whole rebalance.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.admin.client_security import WireSecurity
from strom.admin.errors import AdminError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)

LOG = logging.getLogger("strom.connect.membership")
FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
VERSIONS = {FIND_COORDINATOR: 3, JOIN_GROUP: 5, HEARTBEAT: 3, LEAVE_GROUP: 3, SYNC_GROUP: 3}
PROTOCOL_TYPE = "connect"


class MembershipError(Exception):
    """A group request failed; ``code`` is the Kafka error code (or -1 for the connection)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class JoinResult:
    generation: int
    protocol: str
    leader: str
    member_id: str
    members: dict[str, bytes]  # only the leader gets them

    @property
    def is_leader(self) -> bool:
        return self.leader == self.member_id


def _part(api_key: int, class_name: str, **fields: Any) -> Any:
    module = load_payload_module(api_key, VERSIONS[api_key], EntityType.request)
    return build(getattr(module, class_name), **fields)


class _Connection:
    def __init__(self, host: str, port: int, timeout: float, client_id: str,
                 security: WireSecurity) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        self.sock = security.wrap(sock, host)  # TLS as the worker's security.protocol says
        self.client_id = client_id
        self.correlation = 0

    def request(self, api_key: int, **fields: Any) -> Any:
        version = VERSIONS[api_key]
        self.correlation += 1
        req = build(request_class(api_key, version), **fields)
        self.sock.sendall(encode_request(
            RequestHeader(api_key, version, self.correlation, self.client_id), req))
        size = struct.unpack(">i", self._exact(4))[0]
        correlation, response = decode_response(api_key, version, self._exact(size))
        if correlation != self.correlation:
            raise ConnectionError(f"answer to request {correlation}, expected "
                                  f"{self.correlation}")
        return response

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


class GroupMember:
    """One worker's membership; thread-safe between the herder thread and the heartbeats."""

    def __init__(self, bootstrap: str, group_id: str, *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, client_id: str,
                 security: WireSecurity | None = None) -> None:
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.security = security or WireSecurity()
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self._lock = threading.Lock()  # guards the connections and member identity
        self._main: _Connection | None = None
        self._beat: _Connection | None = None
        self._coordinator: tuple[str, int] | None = None

    # -- connections --------------------------------------------------------------------
    def _find_coordinator(self) -> tuple[str, int]:
        last: Exception | None = None
        for address in self.bootstrap:
            host, _, port = address.rpartition(":")
            try:
                conn = _Connection(host, int(port), 10.0, self.client_id, self.security)
            except (OSError, AdminError) as exc:
                last = exc
                continue
            try:
                resp = conn.request(FIND_COORDINATOR, key=self.group_id, key_type=0)
            finally:
                conn.close()
            if int(resp.error_code) != 0:
                raise MembershipError(int(resp.error_code),
                                      f"FindCoordinator: {ErrorCode(int(resp.error_code)).name}")
            return str(resp.host), int(resp.port)
        raise MembershipError(-1, f"no broker of {','.join(self.bootstrap)} reachable: {last}")

    def _connection(self, which: str) -> _Connection:
        conn = self._main if which == "main" else self._beat
        if conn is None:
            if self._coordinator is None:
                self._coordinator = self._find_coordinator()
            timeout = (self.rebalance_timeout_ms + 10_000) / 1000 if which == "main" else 15.0
            try:
                conn = _Connection(*self._coordinator, timeout, self.client_id, self.security)
            except (OSError, AdminError) as exc:
                self._coordinator = None
                raise MembershipError(-1, f"cannot reach the group coordinator: {exc}") from None
            if which == "main":
                self._main = conn
            else:
                self._beat = conn
        return conn

    def _call(self, which: str, api_key: int, **fields: Any) -> Any:
        conn = self._connection(which)
        try:
            resp = conn.request(api_key, **fields)
        except (OSError, ConnectionError, struct.error) as exc:
            self._drop(which)
            raise MembershipError(-1, f"group coordinator connection failed: {exc}") from None
        code = int(resp.error_code)
        if code in (int(ErrorCode.not_coordinator), int(ErrorCode.coordinator_not_available)):
            self._drop(which)
            self._coordinator = None
        return resp

    def _drop(self, which: str) -> None:
        conn = self._main if which == "main" else self._beat
        if conn is not None:
            conn.close()
        if which == "main":
            self._main = None
        else:
            self._beat = None

    # -- the protocol -------------------------------------------------------------------
    def join(self, protocols: list[tuple[str, bytes]]) -> JoinResult:
        """JoinGroup until it succeeds or fails for good (MembershipError)."""
        for _ in range(3):
            resp = self._call(
                "main", JOIN_GROUP, group_id=self.group_id,
                session_timeout=self.session_timeout_ms,
                rebalance_timeout=self.rebalance_timeout_ms, member_id=self.member_id,
                group_instance_id=None, protocol_type=PROTOCOL_TYPE,
                protocols=tuple(_part(JOIN_GROUP, "JoinGroupRequestProtocol", name=n, metadata=m)
                                for n, m in protocols))
            code = int(resp.error_code)
            if code == int(ErrorCode.member_id_required):
                self.member_id = str(resp.member_id)
                continue
            if code == int(ErrorCode.unknown_member_id):
                self.member_id = ""
            if code != 0:
                raise MembershipError(code, f"JoinGroup: {ErrorCode(code).name}")
            self.member_id = str(resp.member_id)
            self.generation = int(resp.generation_id)
            return JoinResult(self.generation, str(resp.protocol_name), str(resp.leader),
                              self.member_id,
                              {str(m.member_id): bytes(m.metadata) for m in resp.members})
        raise MembershipError(int(ErrorCode.member_id_required), "JoinGroup: no member id")

    def sync(self, assignments: dict[str, bytes]) -> bytes:
        resp = self._call(
            "main", SYNC_GROUP, group_id=self.group_id, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=None,
            assignments=tuple(_part(SYNC_GROUP, "SyncGroupRequestAssignment", member_id=m,
                                    assignment=a) for m, a in assignments.items()))
        code = int(resp.error_code)
        if code == int(ErrorCode.unknown_member_id):
            self.member_id = ""
        if code != 0:
            raise MembershipError(code, f"SyncGroup: {ErrorCode(code).name}")
        return bytes(resp.assignment)

    def heartbeat(self) -> int:
        """The Heartbeat's error code (0 while the generation is current)."""
        with self._lock:
            resp = self._call("beat", HEARTBEAT, group_id=self.group_id,
                              generation_id=self.generation, member_id=self.member_id,
                              group_instance_id=None)
        code = int(resp.error_code)
        if code == int(ErrorCode.unknown_member_id):
            self.member_id = ""
        return code

    def leave(self) -> None:
        if not self.member_id:
            return
        try:
            with self._lock:
                self._call("beat", LEAVE_GROUP, group_id=self.group_id, members=(
                    _part(LEAVE_GROUP, "MemberIdentity", member_id=self.member_id,
                          group_instance_id=None),))
        except MembershipError as exc:
            LOG.warning("LeaveGroup failed: %s", exc)
        self.member_id = ""

    def abort_join(self) -> None:
        """Make a JoinGroup/SyncGroup blocked on another thread fail now (at shutdown)."""
        conn = self._main
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._drop("main")
        self._drop("beat")
