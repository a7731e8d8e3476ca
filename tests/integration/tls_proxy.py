"""A TLS endpoint in front of a plaintext broker, for client-side security tests.

The proxy terminates TLS (its server certificate from the test's CA; client certificates
required and checked against that CA) and pipes the bytes to the broker. A broker started
with ``--advertised-listener`` at the proxy's address sends every client through it, so a
client that works at all has spoken TLS with the certificate it was configured with:
:attr:`TlsProxy.subjects` lists each accepted client certificate's common name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from typing import Any

from strom.testing import free_port


class TlsProxy:
    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
        self.context = context
        self.upstream = upstream
        self.port = free_port()
        self.subjects: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port,
                                                  ssl=self.context)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert: Any = writer.get_extra_info("peercert") or {}
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    self.subjects.append(value)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
