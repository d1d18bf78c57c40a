"""Atomic file writes: the one way pyresnet writes a file.

:func:`atomic_write` writes to a temporary file in the destination's own
folder, flushes and fsyncs it, then renames it over the destination with
``os.replace`` (atomic on POSIX and Windows) and fsyncs the folder.  An
interrupted write (an exception, ``kill -9``, a power cut after the rename)
therefore leaves either the previous file or the complete new one, never a
truncated mix.  The temporary file is ``.<name>.<pid>.<random>.tmp``; one a
killed writer left behind is removed by the next write of ``<name>`` in that
folder (:func:`remove_stale_temps`).  The temporary file is an implementation
detail: an error of making it or of renaming it into place (a missing
folder, a destination that is a folder, no permission) is raised as
``open(path, "w")`` would raise it, naming the path the caller gave.
"""
import contextlib
import os
import re
import tempfile
import time


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would have given a new file


def _fsync_dir(folder):
    """fsync a folder so that a rename in it is durable (best effort: some
    file systems and Windows do not allow opening folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


STALE_SECONDS = 600  # a temporary file untouched this long has no live writer


def _alive(pid):
    """Whether process ``pid`` exists on this machine (a PermissionError
    means it does: someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def remove_stale_temps(path):
    """Remove the temporary files :func:`atomic_write` left for ``path``
    when its writer was killed: only names of our exact pattern
    (``.<name>.<pid>.<8 random>.tmp``, or ``.<name>.<8 random>.tmp`` of
    earlier versions) whose writing process is gone from this machine or
    that nobody has touched for ``STALE_SECONDS``.  Best effort: a file
    that cannot be examined or removed stays.  Returns the paths removed."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(r"\." + re.escape(os.path.basename(path))
                         + r"\.(?:(\d+)\.)?[a-z0-9_]{8}\.tmp")
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        m = pattern.fullmatch(name)
        if not m:
            continue
        tmp = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            pid = int(m.group(1)) if m.group(1) else None
            gone = pid is not None and pid != os.getpid() and not _alive(pid)
            if gone or now - os.stat(tmp).st_mtime > STALE_SECONDS:
                os.remove(tmp)
                removed.append(tmp)
    return removed


def _naming(error, path):
    """``error`` (an OSError about the temporary file) as ``open(path)``
    would have raised it: the same errno and type, naming ``path``."""
    if error.errno is None:
        return error
    return OSError(error.errno, error.strerror, path)  # the errno's subclass


@contextlib.contextmanager
def atomic_write(path, mode="wb", encoding=None, newline=None):
    """Open a temporary file beside ``path`` for writing; on a normal exit
    of the ``with`` block flush, fsync and rename it to ``path``; on an
    exception remove it and leave ``path`` as it was.  Stale temporary
    files of ``path`` are removed first (:func:`remove_stale_temps`).

    Args:
        path (str or PathLike): the destination.
        mode (str): ``"wb"`` or ``"w"`` (text; ``encoding``/``newline`` as
            for ``open``).
    Yields:
        the open file object; its ``name`` is the temporary path (complete
        only once the block ends).
    Raises:
        ValueError: for a mode that is not a write mode.
        OSError: as ``open(path, mode)`` would raise it, naming ``path``
            (not the temporary file): FileNotFoundError when its folder
            does not exist, PermissionError when the folder is not
            writable (nothing is created then), IsADirectoryError when
            ``path`` is a folder (the temporary file is removed).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder,
                                   prefix=f".{os.path.basename(path)}.{os.getpid()}.",
                                   suffix=".tmp")
    except OSError as e:
        raise _naming(e, path) from None
    try:
        os.close(fd)
        os.chmod(tmp, _MODE)  # mkstemp makes 0600 files
        with open(tmp, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)
        except OSError as e:
            raise _naming(e, path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(folder)


def write_bytes(path, data):
    """Write ``data`` (bytes) to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text(path, text, encoding="utf-8"):
    """Write ``text`` to ``path`` atomically, without newline translation."""
    with atomic_write(path, "w", encoding=encoding, newline="") as f:
        f.write(text)


def fsync_tree(folder):
    """fsync every file and folder under ``folder`` (before renaming a
    freshly written folder into place, so its contents are durable first)."""
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(root)
