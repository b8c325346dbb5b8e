"""podresources-exporter: kubelet PodResources allocations joined with hardware telemetry."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("podresources-exporter")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
