"""The channel manager: per-broker order, retries until answered, local calls, removal."""

from __future__ import annotations

import asyncio
from typing import Any

from strom.controller.channel import ChannelManager
from strom.metadata.zk_model import BrokerRegistration, Endpoint


class Flaky:
    """Fails the first ``failures`` sends, then answers with the request itself."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[Any] = []

    async def send(self, api_key: int, api_version: int, request: Any, timeout: float) -> Any:
        self.attempts.append(request)
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionRefusedError("refused")  # as BrokerConnection raises: an OSError
        return ("answer", request)

    def close(self, error: Exception | None = None) -> None:
        pass


def _reg(b: int) -> BrokerRegistration:
    return BrokerRegistration(b, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),))


def test_order_retries_local_calls_and_removal() -> None:
    async def main() -> None:
        local_calls: list[Any] = []

        async def local(api_key: int, version: int, request: Any) -> Any:
            local_calls.append(request)
            return ("local", request)

        conns = {2: Flaky(3), 3: Flaky(10**9)}

        class Network:
            def connect(self, broker_id: int, registration: BrokerRegistration) -> Flaky:
                return conns[broker_id]

            async def local_call(self, api_key: int, version: int, request: Any) -> Any:
                return await local(api_key, version, request)

        channel = ChannelManager(1, Network())
        for b in (1, 2, 3):
            channel.add_broker(b, _reg(b))
        answers: list[Any] = []
        for i in range(3):
            channel.send(2, 6, 8, f"m{i}", answers.append)
        channel.send(1, 6, 8, "self", answers.append)
        channel.send(3, 6, 8, "never", answers.append)
        channel.send(9, 6, 8, "unknown broker", answers.append)  # dropped, no error
        for _ in range(200):
            if len(answers) == 4:
                break
            await asyncio.sleep(0.02)
        assert ("local", "self") in answers and local_calls == ["self"]
        assert [a for a in answers if a[0] == "answer"] == [("answer", f"m{i}") for i in range(3)]
        assert conns[2].attempts[:4] == ["m0"] * 4  # retried until answered, in order
        assert not channel.idle()  # broker 3 never answers
        await channel.remove_broker(3)  # it left the cluster: its retries stop
        tried = len(conns[3].attempts)
        await asyncio.sleep(0.1)
        assert len(conns[3].attempts) == tried and channel.idle()
        await channel.close()

    asyncio.run(main())
