"""Stage 4: the backends, each printing the control IR through the shared handler table.

``cpp/`` prints C++ against ``runtime_cpp/`` and builds it into a shared library;
``python/`` prints Python calling the same kernels and loads it in-process. Each has an
``emit`` module (IR to source) and a ``driver`` (source to a callable ``CompiledModule``);
``emitter.py`` is the text builder and the escaping of user text both share.
"""
