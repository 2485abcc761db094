"""The simulated cluster: nodes, a kubelet and the upstream operators (training operator,
KubeRay, the Deployment and Job controllers), each a client of an API server over HTTP.

It runs against the embedded API server (apiserver/) that `koord-queue up` starts, or any
other, and imports nothing of that server's internals but its field validation.
"""
