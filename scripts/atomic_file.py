"""The one writer of the scripts' output files (the recorders, through
models.write_gz, the GPU scripts, through scripts/gpu/common.py, and the
plots, through save_figure):
standard library only, so that the GPU scripts' --dry-run and their tests
need no torch to import it.

Usage:
    import atomic_file
    with atomic_file.replacing(path, compress=True) as f:
        pickle.dump(snapshot, f)
"""

import contextlib
import errno
import gzip
import os
import tempfile


@contextlib.contextmanager
def replacing(path, compress=False):
    """A binary file for the new content of path, which replaces path only
    when the with block completes: a failed or interrupted write (a full
    disk, an exception, a signal) leaves the previous file, or none, never a
    truncated one. The content goes to a fresh hidden file beside path
    (mkstemp: a fixed PATH.tmp clobbered a file of that name; beside: the
    rename stays on one file system), with the replaced file's permissions or
    those open() gives a new file (not mkstemp's 0600, which would hide a
    shared trace from its readers), then renamed over path. A symbolic link
    path stays one: its target is replaced. With compress, what is written
    is gzip-compressed, reproducibly (no name, mtime 0). On any failure the
    temporary file is removed and the exception raised again.

    A path that exists and is not a regular file (/dev/null, /dev/stdout, a
    FIFO) is written directly, as `coop convert` does: there is nothing to
    rename over (renamed over, /dev/null became a regular file, for root). A
    folder is refused at once (IsADirectoryError), before any work."""
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "wb") as raw:
            if compress:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                    yield gz
            else:
                yield raw
        return
    target = os.path.realpath(path)
    directory, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix="." + base + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw:
            try:
                mode = os.stat(target).st_mode & 0o7777
            except FileNotFoundError:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(raw.fileno(), mode)
            if compress:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                    yield gz
            else:
                yield raw
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save_figure(fig, path, **savefig_args):
    """A matplotlib figure saved as path through replacing: a failed or
    interrupted save leaves the previous image. The format comes from the
    extension, as savefig(path) takes it (png without one); one matplotlib
    does not know is its ValueError."""
    fmt = os.path.splitext(path)[1][1:].lower() or "png"
    with replacing(path) as f:
        fig.savefig(f, format=fmt, **savefig_args)
