"""`python -m koordqueue.apiserver --state-dir DIR [--port P] [--test-controls]`: the API server on its own."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from koordqueue import aio
from koordqueue.apiserver.server import APIServer


async def _serve(state_dir: Path, port: int, test_controls: bool) -> None:
    server = APIServer(state_dir, port, test_controls=test_controls)
    await server.start()
    print(f"kubeconfig: {server.kubeconfig_path}", flush=True)
    print(f"server: {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m koordqueue.apiserver", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True, help="where state, token and kubeconfig live")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--test-controls", action="store_true",
                        help="serve the fault-injection and request-log controls under /_test/ (tests, benchmarks)")
    args = parser.parse_args()
    aio.run(_serve(args.state_dir, args.port, args.test_controls))


if __name__ == "__main__":
    main()
