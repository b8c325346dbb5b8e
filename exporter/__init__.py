"""podresources-exporter: kubelet PodResources allocations joined with hardware telemetry."""

# A literal, not importlib.metadata.version(): that import and its look-up of the
# installed distributions cost ~1.1 MiB of RSS for one string. tests/test_wheel.py holds
# it equal to pyproject.toml's version.
__version__ = "0.1.0"

__all__ = ["__version__"]
