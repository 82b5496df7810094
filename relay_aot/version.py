"""relay_aot's version (a leaf module: everything that stamps or keys output imports it)."""

__version__ = "0.1.0"
