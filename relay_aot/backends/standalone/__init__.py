"""Standalone packages: the control IR printed for a runtime profile with no TVM runtime, no heap
and no C++ runtime, for microcontrollers and cross-compiled boards (see docs/deployment.md,
"Microcontrollers and boards"). ``emit.py`` is the profile (a subclass of the C++ emitter),
``plan.py`` the compile-time storage plan of straight-line programs, ``targets.py`` the table
of targets, ``driver.py`` writes a package."""
