"""The Python backend: ``emit.py`` prints Python, ``runtime.py`` is what that code calls, and
``driver.py`` builds the kernels in memory and loads the source."""
