"""The simulated kube-apiserver: store, registry, HTTP API, discovery, OpenAPI, logs and exec."""
