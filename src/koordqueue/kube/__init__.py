"""The thin Kubernetes client the controller is built on.

config (kubeconfig, in-cluster), client (REST over aiohttp, raw dicts, rate limit,
retries), errors, informer (list + watch into a cache of small projections), workqueue,
events, leader (Lease election), ratelimit (token bucket, backoff). Import from the
modules themselves.
"""
