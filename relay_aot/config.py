"""Every setting of relay_aot, declared once, read at one defined time.

A setting is a field of :class:`Config` whose metadata names its environment variable, how its
text is parsed, and whether it changes what a compile produces (``output=True``: the generated
code, the kernels, or the built library). :meth:`Config.output_key` hashes exactly those fields,
so a new setting that changes generated code is part of every cache key by construction:
nobody has to remember to add it.

:func:`Config.from_environment` reads the environment once; ``relay_aot.compile`` calls it at
its start and passes the result down, so a setting changed halfway through a compile does not
mix two configurations (tests change settings with ``monkeypatch.setenv`` between compiles).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def _flag(text: str) -> bool:
    return text not in ("", "0")


def _count(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name} must be a whole number, not {text!r}") from None
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"RELAY_AOT_LOCK_TIMEOUT must be a number of seconds, not {text!r}") from None


def _default_cache_dir(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "relay_aot")


def _cache_dir(text: str) -> Path:
    # Absolute: compile commands run inside build directories, and libraries outlive a chdir.
    return Path(os.path.abspath(os.path.expanduser(text)))


def setting(env: str, default: Any, parse: Callable[[str], Any], output: bool, doc: str):
    """A :class:`Config` field read from ``$env`` (``default``: a value, or a function of the
    environment giving the text to parse). ``output``: the setting changes what is built."""
    return dataclasses.field(metadata={"env": env, "default": default, "parse": parse, "output": output, "doc": doc})


@dataclasses.dataclass(frozen=True)
class Config:
    """The settings of one compile (see ``docs/build.md`` for each variable)."""

    target: str = setting(
        "RELAY_AOT_TARGET",
        "host",
        lambda text: text.strip() or "host",
        True,
        "the target of a compile that names none: host (this machine's CPU, named explicitly), or a TVM "
        "target such as llvm (any x86-64) or 'llvm -mcpu=skylake'",
    )
    scalar_fast_path: bool = setting(
        "RELAY_AOT_SCALAR_FAST_PATH",
        "1",
        _flag,
        True,
        "compute 0-d arithmetic kernels as native scalar code (0 turns it off)",
    )
    parallel_threshold: int = setting(
        "RELAY_AOT_PARALLEL_THRESHOLD",
        str(1 << 15),
        _count("RELAY_AOT_PARALLEL_THRESHOLD"),
        True,
        "kernels with fewer loop iterations run without TVM's thread pool",
    )
    winograd: bool = setting(
        "RELAY_AOT_WINOGRAD",
        "1",
        _flag,
        True,
        "compute 3x3 convolutions with constant weights by Winograd's algorithm on AVX-512 (fewer "
        "multiplications, float32 results within a few ulps of the largest output; 0 turns it off)",
    )
    cxx: str = setting("CXX", "g++", lambda text: text or "g++", True, "the C++ compiler")
    cxxflags: tuple = setting(
        "RELAY_AOT_CXXFLAGS",
        "",
        lambda text: tuple(shlex.split(text)),
        True,
        "extra compiler flags, after relay_aot's own",
    )
    pch: bool = setting("RELAY_AOT_PCH", "1", _flag, True, "use a precompiled runtime header (GCC)")
    prebuilt: bool = setting(
        "RELAY_AOT_PREBUILT",
        "1",
        _flag,
        False,
        "start a cache with the precompiled header and runtime object pip install built (0: compile them)",
    )
    profile: bool = setting(
        "RELAY_AOT_PROFILE",
        "0",
        _flag,
        True,
        "build every library instrumented for profiling (as compile(..., profile=True) does)",
    )
    standalone: bool = setting(
        "RELAY_AOT_STANDALONE",
        "0",
        _flag,
        True,
        "compile for a standalone package: unpacked, serial kernels and the standalone runtime profile "
        "(as export_standalone does)",
    )
    c_kernels: bool = setting(
        "RELAY_AOT_C_KERNELS",
        "0",
        _flag,
        True,
        "the kernels are printed as C by TVM's c target (export_standalone sets it for a target whose "
        "row names one): relay_aot's C micro-kernels for Arm's DSP extension may compute them",
    )
    jobs: int = setting(
        "RELAY_AOT_JOBS",
        lambda environ: str(os.cpu_count() or 1),
        _count("RELAY_AOT_JOBS"),
        False,
        "parallel compile jobs: C++ units, and processes lowering and building kernels",
    )
    cache_dir: Path = setting("RELAY_AOT_CACHE_DIR", _default_cache_dir, _cache_dir, False, "the build cache")
    lock_timeout: float = setting(
        "RELAY_AOT_LOCK_TIMEOUT",
        "600",
        _seconds,
        False,
        "seconds to wait for another process's build of the same library",
    )
    progress: bool | None = setting(
        "RELAY_AOT_PROGRESS",
        None,
        _flag,
        False,
        "1/0: force the progress line on or off (default: on when stderr is a terminal)",
    )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The settings in ``environ`` (default ``os.environ``), each parsed once."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            meta = field.metadata
            text = environ.get(meta["env"])
            if text is None:
                default = meta["default"]
                text = default(environ) if callable(default) else default
            values[field.name] = None if text is None else meta["parse"](text)
        return cls(**values)

    def output_key(self) -> str:
        """Every setting that changes what a compile produces, as text for a cache key."""
        return "\n".join(f"{f.name}={getattr(self, f.name)!r}" for f in output_settings())


def output_settings() -> list[dataclasses.Field]:
    """The fields of :class:`Config` that change generated code or the built library."""
    return [f for f in dataclasses.fields(Config) if f.metadata["output"]]
