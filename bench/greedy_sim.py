"""The yardstick for `koord-queue simulate`: a plain greedy loop over the same trace.

Each job waits in its quota's FIFO and starts as soon as it fits under its quota's max
and its parent's; it prints each job's submitted/admitted/finished as JSON. It reads
the trace as fast as a short script does: orjson for JSON, libyaml's C loader for YAML.

    .venv/bin/python bench/greedy_sim.py TRACE > out.json
"""

import heapq
import json
import sys
from collections import deque

import orjson
import yaml

SUFFIX = {"m": 0.001, "k": 1e3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def amount(text):
    for suffix, factor in SUFFIX.items():
        if str(text).endswith(suffix):
            return float(str(text)[: -len(suffix)]) * factor
    return float(text)


def main(path):
    with open(path, "rb") as file:
        data = file.read()
    trace = orjson.loads(data) if data.lstrip()[:1] == b"{" else yaml.load(data, Loader=yaml.CSafeLoader)
    quotas, parent, used, waiting = {}, {}, {}, {}
    for obj in trace.get("objects") or []:
        if obj.get("kind") == "ElasticQuota":
            name = obj["metadata"]["name"]
            quotas[name] = {r: amount(v) for r, v in obj["spec"]["max"].items()}
            parent[name] = (obj["metadata"].get("labels") or {}).get("quota.scheduling.koordinator.sh/parent")
            used[name], waiting[name] = {r: 0.0 for r in quotas[name]}, deque()
    jobs, heap = [], []
    for i, entry in enumerate(trace.get("jobs") or []):
        manifest = entry["manifest"]
        request = {}
        for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
            for container in spec["template"]["spec"]["containers"]:
                for r, v in container.get("resources", {}).get("requests", {}).items():
                    request[r] = request.get(r, 0.0) + amount(v) * spec.get("replicas", 1)
        quota = manifest["metadata"]["annotations"]["scheduling.x-k8s.io/queue"]
        chain = [quota] + ([parent[quota]] if parent.get(quota) else [])
        jobs.append({"i": i, "name": manifest["metadata"]["name"], "submitted": entry["at"], "admitted": None,
                     "finished": None, "request": request, "chain": chain, "runtime": entry.get("runtime")})
        heapq.heappush(heap, (entry["at"], 1, i))
    while heap:
        now = heap[0][0]
        while heap and heap[0][0] <= now:
            _, kind, i = heapq.heappop(heap)
            job = jobs[i]
            if kind == 0:  # finished: give its room back
                job["finished"] = now
                for q in job["chain"]:
                    for r, v in job["request"].items():
                        used[q][r] -= v
            else:
                waiting[job["chain"][0]].append(job)
        for queue in waiting.values():
            while queue and all(used[q].get(r, 0) + v <= quotas[q].get(r, 0) + 1e-9
                                for q in queue[0]["chain"] for r, v in queue[0]["request"].items()):
                job = queue.popleft()
                job["admitted"] = now
                for q in job["chain"]:
                    for r, v in job["request"].items():
                        used[q][r] += v
                if job["runtime"] is not None:
                    heapq.heappush(heap, (now + job["runtime"], 0, job["i"]))
    print(json.dumps({"jobs": [{k: job[k] for k in ("name", "submitted", "admitted", "finished")} for job in jobs]},
                     indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
