"""The embedded control plane: a Kubernetes-compatible API server and a simulated cluster.

It exists so that everything (the controller, kubectl, tests, benchmarks, `koord-queue up`)
runs with no cluster at all, through the same HTTP API a real cluster serves.
"""
