"""The build cache on disk: private directories, atomic writes, locks, digests and the module index.

The cache lives in ``$RELAY_AOT_CACHE_DIR`` (default: the user cache directory). Libraries in
it are loaded into the compiling process, so whoever can write to it can run code there; the
rules that keep it trustworthy:

* every directory relay_aot creates in it is private (0700) and is checked -- owner and mode --
  before use; a root or subdirectory that another user owns or can write is refused with an
  error naming the fix (a root readable by others is accepted: everything is stored inside
  private subdirectories);
* every file is written with :func:`write_atomic` (a private temporary file renamed into place)
  or inside a private build directory that is renamed into place as a whole, so a crash never
  leaves a half-written file under a final name;
* every published library carries its SHA-256 digest in a side file written before the
  directory is published, and the library is checked against it before it is loaded: a
  truncated or corrupted library (a full disk, a crash before the data reached the disk) is
  evicted and rebuilt instead of crashing ``dlopen``;
* an index record may only name a library inside ``lib/``, by a relative path of the expected
  form; anything else is ignored;
* a cached kernel object is used only if its digest and the functions recorded beside it match
  (:func:`lookup_object`): a damaged or colliding entry is rebuilt, never linked; the runtime
  object is kept and checked the same way.

Layout::

    lib/<key[:2]>/<key>/     finished entries: <model>-<key[:24]>.so, its .sha256, its sources
    index/<k[:2]>/<k>.json   module key (Relay module, params, options) -> finished entry
    pch/<pch key>/           precompiled runtime headers (relay_aot/runtime.h{,.gch})
    kernels/<k[:2]>/<k>.o    kernels' object files by kernel key (their content), with <k>.json:
                             the object's digest and the primitive functions it was built from
    runtime/<k[:2]>/<k>.o    the runtime object (runtime_cpp/relay_aot/runtime.cc) by toolchain
                             and runtime sources, with <k>.json: its digest and toolchain
    units/<k[:2]>/<k>.o      generated units' object files by what they are compiled from (text,
                             files they read, command, toolchain), with <k>.json likewise
    tmp/                     builds in progress (and cache=False builds of running processes)
    failed/<model>-<key[:16]>/   the sources and build.ninja of the last failed build of a key
    locks/                   one lock file per key (never deleted while the cache is in use)
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import tvm

from ..config import Config
from ..errors import CompileError
from ..version import __version__
from .toolchain import BuildFlags, runtime_sources_digest

_PACKAGE_DIR = Path(__file__).resolve().parent.parent

#: The subdirectories of the cache root (see the module docstring).
SUBDIRS = ("lib", "index", "pch", "kernels", "runtime", "units", "tmp", "failed", "locks")

#: Suffix of the side file holding a library's SHA-256 digest.
DIGEST_SUFFIX = ".sha256"


# -- files and directories -------------------------------------------------------------------


def write_atomic(path: Path, content: bytes | str | Path, mode: int = 0o600) -> Path:
    """Write ``content`` (bytes, text, or the contents of the file at a ``Path``) to ``path``
    through a private temporary file in the same directory, renamed over ``path``.

    Readers see the old file or the new one, never a part. Returns ``path``.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(content, Path):
                with open(content, "rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
            else:
                out.write(content.encode() if isinstance(content, str) else content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def check_replaceable(path: Path, what: str) -> None:
    """Refuse, with ``ValueError`` naming ``what`` (the caller), to replace anything at ``path``
    but a regular file: :func:`write_atomic` would replace a symbolic link, not write through
    it, but a caller that opened the path would follow it, and a FIFO would block it."""
    try:
        mode = Path(path).lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise ValueError(
            f"{what}: {path} is {file_kind(mode)}, not a regular file; give a new path or a regular file to replace"
        )


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words: "a symbolic link", "a FIFO", ..."""
    kinds = [
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")


def _untrusted(path: Path, why: str) -> CompileError:
    return CompileError(
        f"the relay_aot cache directory {path} {why}; libraries from it would be loaded into this "
        "process. Use a private directory (set RELAY_AOT_CACHE_DIR), or remove this one and let "
        "relay_aot create it again."
    )


def _check_owner_and_mode(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise _untrusted(path, "is not a directory")
    if info.st_uid != os.getuid():
        raise _untrusted(path, "is owned by another user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _untrusted(path, f"is writable by others (mode {stat.S_IMODE(info.st_mode):o}; `chmod 700` it)")


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if missing; an existing one must be ours, a real directory, and
    writable by nobody else (then its group/other bits are cleared, to keep the cache private)."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError as err:
        raise CompileError(f"cannot create the relay_aot cache directory {path}: {err}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _untrusted(path, "is a symbolic link")
    _check_owner_and_mode(path, info)
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)  # readable by others (an older relay_aot, a umask): ours, tighten it
    return path


def cache_root(config: Config) -> Path:
    """The cache directory of ``config``, created private (0700) if it does not exist.

    An existing root must belong to the user and not be writable by others (it may be readable:
    everything in it lives in private subdirectories).
    """
    root = config.cache_dir
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = root.stat()
    except OSError as err:
        raise CompileError(f"cannot create the relay_aot cache directory {root}: {err}") from None
    _check_owner_and_mode(root, info)
    return root


def subdir(root: Path, *parts: str) -> Path:
    """The private directory ``root/parts[0]/parts[1]/...``, each level created and checked."""
    path = root
    for part in parts:
        path = private_dir(path / part)
    return path


def clear_cache(config: Config | None = None) -> None:
    """Delete every cached library, object file (kernels, runtime, units), precompiled header and failed build.

    Libraries already loaded keep working. Builds running in other processes are left alone
    (as are the lock files, which those builds may hold).
    """
    root = (config or Config.from_environment()).cache_dir
    if not root.exists():
        return
    for name in ("index", "lib", "kernels", "runtime", "units", "pch", "failed"):
        shutil.rmtree(root / name, ignore_errors=True)
    sweep_tmp(root)


# -- locks and build directories ---------------------------------------------------------------


class Lock:
    """An exclusive ``flock`` on a file, with a timeout; released by the OS if the holder dies."""

    def __init__(self, path: Path, timeout: float, on_wait: Callable[[], None] | None = None):
        self.path = path
        self.timeout = timeout
        self.on_wait = on_wait
        self.fd: int | None = None

    def try_acquire(self, create: bool = True) -> bool:
        """Take the lock if it is free; never waits. ``create=False``: the file must exist."""
        fd = os.open(self.path, (os.O_CREAT if create else 0) | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        """Release the lock (closing the file releases the ``flock``)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Lock:
        deadline = time.monotonic() + self.timeout
        waited = False
        while not self.try_acquire():
            if not waited and self.on_wait is not None:
                self.on_wait()
            waited = True
            if time.monotonic() > deadline:
                raise CompileError(
                    f"timed out after {self.timeout:g} s waiting for another process's build "
                    f"(lock file {self.path}); if no relay_aot build is running, delete it"
                )
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def key_lock(root: Path, name: str, timeout: float, on_wait: Callable[[], None] | None = None) -> Lock:
    """The lock named ``name`` in ``locks/``."""
    return Lock(subdir(root, "locks") / f"{name}.lock", timeout, on_wait)


_TMP_LOCK = ".relay_aot-building"

#: A build directory younger than this is never swept (its owner may not have locked it yet).
_SWEEP_MIN_AGE = 60.0

#: Locks of this process's cache=False build directories: held until the process exits.
_held: list[Lock] = []


def new_build_dir(root: Path, prefix: str) -> tuple[Path, Lock]:
    """A fresh private directory under ``tmp/``, locked while in use (a dead owner's lock is free)."""
    path = Path(tempfile.mkdtemp(prefix=prefix + "-", dir=subdir(root, "tmp")))
    lock = Lock(path / _TMP_LOCK, 0)
    lock.try_acquire()
    return path, lock


def move_locked(build_dir: Path, lock: Lock, dest: Path) -> None:
    """Rename ``build_dir`` to ``dest`` while still holding its lock, then drop the lock.

    Holding the lock through the rename keeps :func:`sweep_tmp` away from a directory that is
    being published.
    """
    try:
        os.rename(build_dir, dest)
        (dest / _TMP_LOCK).unlink(missing_ok=True)
    finally:
        lock.release()


def sweep_tmp(root: Path) -> None:
    """Delete build directories of dead processes (their lock is free) under ``tmp/``."""
    tmp = root / "tmp"
    if not tmp.is_dir():
        return
    now = time.time()
    for entry in tmp.iterdir():
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue
        if age < _SWEEP_MIN_AGE:
            continue
        lock = Lock(entry / _TMP_LOCK, 0)
        try:
            free = lock.try_acquire(create=False)
        except FileNotFoundError:  # its process died before it could lock it
            free = age > 3600
        except OSError:
            continue
        if free:
            shutil.rmtree(entry, ignore_errors=True)
        lock.release()


def keep_until_exit(path: Path, lock: Lock) -> None:
    """Hold ``lock`` (so no sweep removes ``path``) and delete ``path`` when the process exits."""
    _held.append(lock)
    atexit.register(shutil.rmtree, path, True)


# -- library digests -----------------------------------------------------------------------------


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's contents, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digest(library: Path) -> None:
    """Write ``library``'s digest next to it (before its directory is published)."""
    write_atomic(library.with_name(library.name + DIGEST_SUFFIX), file_digest(library) + "\n")


#: Libraries this process has verified (path, inode, size, mtime): each is hashed once.
_verified: set[tuple] = set()


def library_intact(library: Path) -> bool:
    """Whether ``library`` is a regular file matching the digest recorded beside it."""
    try:
        info = library.lstat()
        if not stat.S_ISREG(info.st_mode):
            return False
        identity = (str(library), info.st_ino, info.st_size, info.st_mtime_ns)
        if identity in _verified:
            return True
        expected = library.with_name(library.name + DIGEST_SUFFIX).read_text().strip()
        if file_digest(library) != expected:
            return False
    except OSError:
        return False
    _verified.add(identity)
    return True


# -- the module index: warm compiles without passes ---------------------------------------------


@functools.cache
def package_digest() -> str:
    """Hash of relay_aot's Python code and C++ runtime: what turns a module into a library.

    Computed once per process (``relay_aot.compiler`` pins it at import), so an edit of the
    files on disk never pairs new keys with old code.
    """
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(runtime_sources_digest().encode())
    return digest.hexdigest()


def code_identity() -> tuple[str, str, str]:
    """The code that turns inputs into outputs, first in every key of the cache: this
    relay_aot (its version, its Python and C++ sources) and TVM's version."""
    return f"relay_aot {__version__}", package_digest(), f"tvm {tvm.__version__}"


def index_key(parts: Iterable[str], flags: BuildFlags, config: Config) -> str:
    """Key of an input (``parts``: the module's fingerprint, parameters, options) under
    ``flags`` and the output-changing settings of ``config``."""
    digest = hashlib.sha256()
    head = (*code_identity(), flags.identity(), config.output_key())
    for part in (*head, *parts):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass
class Entry:
    """A finished library in ``lib/``: its path, build key and directory."""

    library: Path
    key: str

    @property
    def directory(self) -> Path:
        return self.library.parent


@dataclasses.dataclass
class IndexEntry:
    """A finished library found through the module index, with its generated files' names."""

    entry: Entry
    files: list[str]
    units: list[str]

    def read_files(self) -> dict[str, str]:
        """The generated sources kept next to the library."""
        return {name: (self.entry.directory / name).read_text() for name in self.files}


def _index_path(root: Path, key: str) -> Path:
    return subdir(root, "index", key[:2]) / f"{key}.json"


#: The form of an index record's library path: lib/<key[:2]>/<key>/<model>-<key[:24]>.so
_LIBRARY_PATH = re.compile(r"lib/([0-9a-f]{2})/([0-9a-f]{64})/[A-Za-z_][A-Za-z0-9_]{0,63}-([0-9a-f]{24})\.so\Z")


def _library_of_record(root: Path, record: dict) -> Entry | None:
    """The entry an index record names, if the name has the expected form and stays in ``lib/``."""
    text, key = record.get("library"), record.get("key")
    if not isinstance(text, str):
        return None
    match = _LIBRARY_PATH.match(text)
    if (
        match is None
        or match.group(2) != key
        or not key.startswith(match.group(1))
        or not key.startswith(match.group(3))
    ):
        return None
    library = root / text
    try:
        if not library.resolve(strict=True).is_relative_to((root / "lib").resolve(strict=True)):
            return None
    except OSError:
        return None
    return Entry(library, key)


def lookup_index(root: Path, key: str) -> IndexEntry | None:
    """The intact library recorded for module key ``key``; a damaged one is evicted."""
    path = _index_path(root, key)
    try:
        record = json.loads(path.read_text())
        files, units = list(record["files"]), list(record["units"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    entry = _library_of_record(root, record) if isinstance(record, dict) else None
    if entry is None or not all(isinstance(n, str) and "/" not in n for n in files + units):
        path.unlink(missing_ok=True)
        return None
    if not library_intact(entry.library):
        path.unlink(missing_ok=True)
        return None
    return IndexEntry(entry, files, units)


def record_index(root: Path, key: str, entry: Entry, files: Iterable[str], units: Iterable[str]) -> None:
    """Remember that module key ``key`` compiles to the cached library of ``entry``."""
    if not entry.library.is_relative_to(root / "lib"):
        return
    record = {
        "library": str(entry.library.relative_to(root)),
        "key": entry.key,
        "files": list(files),
        "units": list(units),
    }
    write_atomic(_index_path(root, key), json.dumps(record))


def evict(root: Path, entry: Entry, timeout: float) -> None:
    """Remove a cache entry that turned out to be unusable (e.g. a truncated library)."""
    with key_lock(root, entry.key, timeout):
        shutil.rmtree(entry.directory, ignore_errors=True)


# -- object files: kernels built before, and the runtime object -------------------------------------


def kernel_key(kernel_digest: str) -> str:
    """Key of a kernels' object file: their digest (functions, symbols, target, settings,
    tuning) under this relay_aot's code and TVM. No C++ flag changes TVM's output."""
    digest = hashlib.sha256()
    for part in (*code_identity(), kernel_digest):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _object_paths(root: Path, kind: str, key: str) -> tuple[Path, Path]:
    directory = subdir(root, kind, key[:2])
    return directory / f"{key}.o", directory / f"{key}.json"


def lookup_object(root: Path, kind: str, key: str, dest: Path, same: Callable[[str], bool]) -> bool:
    """Copy the object file of ``key`` (``kind``: "kernels", "runtime" or "units") to ``dest`` if it is
    cached, intact (its digest), and ``same(identity)`` confirms it was built from the same
    inputs; False otherwise.

    The copy is what is checked, so an entry replaced meanwhile is never linked unchecked.
    """
    obj, record_path = _object_paths(root, kind, key)
    try:
        record = json.loads(record_path.read_text())
        digest, identity = record["digest"], record["identity"]
        shutil.copyfile(obj, dest)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(identity, str) or file_digest(dest) != digest or not same(identity):
        dest.unlink(missing_ok=True)
        return False
    return True


def record_object(root: Path, kind: str, key: str, obj: Path, identity: str) -> None:
    """Keep the object file ``obj`` under ``key`` with its digest and ``identity``.

    Both files are written atomically, the record last; processes that build the same object
    at once write the same entry, and a reader checks the object against the record's digest.
    """
    path, record_path = _object_paths(root, kind, key)
    write_atomic(path, obj)
    write_atomic(record_path, json.dumps({"digest": file_digest(obj), "identity": identity}))
