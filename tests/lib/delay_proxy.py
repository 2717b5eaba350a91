#!/usr/bin/env python3
"""delay_proxy.py — test-only TCP proxy that adds latency (this kernel has
no netem): every chunk read on one side is written to the other side
DELAY_MS later, order preserved, in both directions.

    delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS [--max-seconds N]

SIGUSR1 stalls the link: nothing is forwarded (reads go on, into the
queue) until SIGUSR2, which delivers what was held, in order. Exits by
itself after --max-seconds (default 600)."""
import asyncio
import signal
import sys
import time

flowing = None  # asyncio.Event: set while forwarding, cleared by SIGUSR1


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def pump():
        while True:
            when, data = await queue.get()
            if data is None:
                break
            pause = when - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            await flowing.wait()
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.ensure_future(pump())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            await queue.put((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    await queue.put((0, None))
    await task


async def main():
    global flowing
    flowing = asyncio.Event()
    flowing.set()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, flowing.clear)
    loop.add_signal_handler(signal.SIGUSR2, flowing.set)
    listen, target, delay_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    max_seconds = 600.0
    if "--max-seconds" in sys.argv:
        max_seconds = float(sys.argv[sys.argv.index("--max-seconds") + 1])
    lhost, lport = listen.rsplit(":", 1)
    thost, tport = target.rsplit(":", 1)

    async def handle(reader, writer):
        try:
            ureader, uwriter = await asyncio.open_connection(thost, int(tport))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, uwriter, delay_ms / 1000.0), pipe(ureader, writer, delay_ms / 1000.0),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, lhost, int(lport))
    print("listening", flush=True)
    async with server:
        await asyncio.sleep(max_seconds)


if __name__ == "__main__":
    asyncio.run(main())
