"""Generated gRPC stubs for the kubelet PodResources API (see scripts/generate_stubs.py)."""
