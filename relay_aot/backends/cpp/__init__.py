"""The C++ backend: ``emit.py`` prints C++, ``driver.py`` builds and loads the library."""
