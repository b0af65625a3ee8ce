"""The package version (one place; the tuning database records it with every measurement)."""

__version__ = "0.1.0"
