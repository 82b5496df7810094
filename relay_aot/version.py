"""relay_aot's version (a leaf module: everything that stamps or keys output imports it).

The one place it is written: the distribution's metadata takes it from here at build time
(pyproject.toml's dynamic version), and ``relay-aot --version`` prints it.
"""

__version__ = "0.1.0"
