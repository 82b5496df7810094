"""Benchmarks: relay_aot against TVM's Relay interpreter, VM, graph and AOT executors and py_converter.

``python -m benchmarks`` runs the suite (see ``README.md`` beside this file). Modules:
``workloads`` (the programs), ``executors`` (one adapter per executor), ``timing``,
``kernel_floor`` (kernel-only time), ``suite`` (run and check, in process or as a worker),
``report`` (tables and chart), ``machine`` (what it ran on), ``cli`` (the entry point).
"""
