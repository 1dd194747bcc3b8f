"""The package version, importable without importing anything else (``daskdepth --version``)."""

__version__ = "0.1.0"
