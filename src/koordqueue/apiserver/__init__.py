"""The embedded Kubernetes-compatible API server (aiohttp, SQLite).

It exists so that everything (the controller, kubectl, tests, benchmarks, `koord-queue up`)
runs with no cluster at all, through the same HTTP API a real cluster serves. It knows our
API's strings and CRDs, to serve them, and nothing of the simulated cluster (simcluster/)
that runs against it over HTTP, as against kube-apiserver.
"""
