#!/usr/bin/env python3
"""A tiny TCP proxy that makes loopback look like a WAN link, for the benchmarks.

    throttle.py LISTEN_PORT UPSTREAM_HOST:UPSTREAM_PORT RATE_MBIT LATENCY_MS

Every accepted connection gets its own upstream connection. Data from the upstream (the
download direction) is paced to RATE_MBIT megabit/s **per connection** (a token bucket refilled
every few milliseconds), and each chunk is delayed by LATENCY_MS (one-way, both directions), so
every request/response round trip costs about 2 × LATENCY_MS more. Aggregate throughput is not
limited: N parallel connections get N × RATE_MBIT, as from a CDN or a registry behind one.
Both the tool under test and the reference tools are pointed at the same proxies.
"""

import asyncio
import sys
import time

CHUNK = 64 * 1024


async def pipe(reader, writer, rate_bps, latency):
    """Copies reader → writer through a delay line; rate_bps None means unpaced."""
    queue = asyncio.Queue(maxsize=64)  # bounded: at most 64 × CHUNK in flight per direction

    async def receive():
        try:
            while True:
                data = await reader.read(CHUNK)
                await queue.put((time.monotonic(), data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await queue.put((time.monotonic(), b""))

    receiver = asyncio.ensure_future(receive())
    sent = 0
    start = None
    try:
        while True:
            arrived, data = await queue.get()
            wait = arrived + latency - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            if rate_bps:
                now = time.monotonic()
                if start is None or now - (start + sent / rate_bps) > 0.05:
                    # A fresh or idle connection (keep-alive between requests) earns no burst.
                    start, sent = now, 0
                sent += len(data)
                delay = start + sent / rate_bps - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        receiver.cancel()
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def handle(client_r, client_w, host, port, rate_bps, latency):
    try:
        up_r, up_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(
        pipe(client_r, up_w, None, latency),
        pipe(up_r, client_w, rate_bps, latency),
    )
    for w in (client_w, up_w):
        try:
            w.close()
        except OSError:
            pass


async def main():
    listen, upstream, rate_mbit, latency_ms = sys.argv[1:5]
    host, port = upstream.rsplit(":", 1)
    rate_bps = float(rate_mbit) * 1e6 / 8 if float(rate_mbit) > 0 else None
    latency = float(latency_ms) / 1000.0
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, host, int(port), rate_bps, latency),
        "127.0.0.1",
        int(listen),
        backlog=256,
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
