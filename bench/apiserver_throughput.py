"""Write throughput of the embedded API server: 8 concurrent writers, 3 open watches.

The server runs in its own process (`python -m koordqueue.apiserver`), as in
`koord-queue up`; writers and watchers talk HTTPS to it like any client. Each writer
creates ConfigMaps and updates each one once (half PUT, half merge patch). Prints
writes/s and p50/p99 write latency, and checks every watch saw every write.

    .venv/bin/python bench/apiserver_throughput.py [--seconds 10] [--clients 8] [--watches 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import yaml

NS = "default"
CMS = f"/api/v1/namespaces/{NS}/configmaps"


def _start_server(state: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "koordqueue.apiserver", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("kubeconfig:"):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    config = yaml.safe_load(Path(line.split(":", 1)[1].strip()).read_text())
    cluster = config["clusters"][0]["cluster"]
    return proc, {"url": cluster["server"], "token": config["users"][0]["user"]["token"],
                  "ca": base64.b64decode(cluster["certificate-authority-data"]).decode()}


async def _watch(session: aiohttp.ClientSession, url: str, params: dict[str, str], seen: list[int],
                 stop: asyncio.Event) -> None:
    async with session.get(url, params={"watch": "true", **params}) as resp:
        async for line in resp.content:
            if line.strip():
                event = orjson.loads(line)
                if event["type"] in ("ADDED", "MODIFIED"):
                    seen[0] += 1
            if stop.is_set():
                return


async def _writer(session: aiohttp.ClientSession, base: str, wid: int, deadline: float,
                  latencies: list[float]) -> None:
    i = 0
    while time.perf_counter() < deadline:
        name = f"w{wid}-{i}"
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"bench": "yes", "writer": str(wid)}}, "data": {"n": str(i)}}
        t0 = time.perf_counter()
        async with session.post(base + CMS, data=orjson.dumps(body),
                                headers={"Content-Type": "application/json"}) as resp:
            created = orjson.loads(await resp.read())
            assert resp.status == 201, created
        t1 = time.perf_counter()
        created["data"]["n"] = "updated"
        if i % 2:
            request = session.put(base + f"{CMS}/{name}", data=orjson.dumps(created),
                                  headers={"Content-Type": "application/json"})
        else:
            request = session.patch(base + f"{CMS}/{name}", data=b'{"data":{"n":"patched"}}',
                                    headers={"Content-Type": "application/merge-patch+json"})
        async with request as resp:
            await resp.read()
            assert resp.status == 200, resp.status
        t2 = time.perf_counter()
        latencies += [t1 - t0, t2 - t1]
        i += 1


async def _run(args: argparse.Namespace, server: dict[str, str]) -> int:
    ctx = ssl.create_default_context(cadata=server["ca"])
    headers = {"Authorization": f"Bearer {server['token']}", "Accept": "application/json"}
    connector = aiohttp.TCPConnector(ssl=ctx, limit=args.clients + args.watches + 2)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async with session.get(server["url"] + CMS) as resp:
            rv = (await resp.json())["metadata"]["resourceVersion"]
        stop = asyncio.Event()
        watch_params = [{"resourceVersion": rv}, {"resourceVersion": rv, "labelSelector": "bench=yes"},
                        {"resourceVersion": rv, "allowWatchBookmarks": "true"}]
        urls = [server["url"] + CMS, server["url"] + "/api/v1/configmaps", server["url"] + CMS]
        seen = [[0] for _ in range(args.watches)]
        watches = [asyncio.ensure_future(_watch(session, urls[i % 3], watch_params[i % 3], seen[i], stop))
                   for i in range(args.watches)]
        await asyncio.sleep(0.3)
        latencies: list[float] = []
        start = time.perf_counter()
        deadline = start + args.seconds
        await asyncio.gather(*(_writer(session, server["url"], w, deadline, latencies) for w in range(args.clients)))
        elapsed = time.perf_counter() - start
        for _ in range(100):  # let the watches drain
            if all(s[0] >= len(latencies) for s in seen):
                break
            await asyncio.sleep(0.05)
        stop.set()
        for w in watches:
            w.cancel()
    lat = sorted(latencies)
    p50 = statistics.median(lat) * 1000
    p99 = lat[int(len(lat) * 0.99) - 1] * 1000
    print(f"writes: {len(lat)} in {elapsed:.1f}s = {len(lat) / elapsed:.0f} writes/s "
          f"({args.clients} writers, {args.watches} watches)")
    print(f"latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"watch events seen: {[s[0] for s in seen]} (expected {len(lat)} each)")
    return 0 if all(s[0] >= len(lat) for s in seen) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--watches", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, server = _start_server(Path(tmp) / "state")
        try:
            code = asyncio.run(_run(args, server))
        finally:
            proc.terminate()
            proc.wait(10)
    os._exit(code)


if __name__ == "__main__":
    main()
