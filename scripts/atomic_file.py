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
import signal
import tempfile
import threading


@contextlib.contextmanager
def replacing(path, compress=False):
    """A binary file for the new content of path, which replaces path only
    when the with block completes: a failed or interrupted write (a full
    disk, an exception, a signal) leaves the previous file, or none, never a
    truncated one, nor the temporary file (SIGTERM and SIGHUP included: see
    _catch_termination; the process still dies of the signal). The content
    goes to a fresh hidden file beside path (mkstemp: a fixed PATH.tmp
    clobbered a file of that name; beside: the rename stays on one file
    system), with the replaced file's permissions or
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
    tmp = None
    caught = _catch_termination()
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + base + ".", dir=directory)
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
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(e, _Terminated) and caught:
            # die of the signal, as the process would have without us: the
            # status (128 + N in a shell) says how it ended
            _restore(caught)
            caught = None
            os.kill(os.getpid(), e.signum)
            raise SystemExit(128 + e.signum) from None  # were it blocked
        raise
    finally:
        if caught:
            _restore(caught)


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the write was, so that replacing
    removes its temporary file before the process ends."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    raise _Terminated(signum)


def _catch_termination():
    """SIGTERM and SIGHUP (kill, a batch system's time limit, a closed
    terminal) end Python at once by default, with no finally run: the hidden
    temporary file stayed beside the output. Where they have their default
    action (a program's own handler is left alone) and this is the main
    thread (the only one that may set handlers), they raise _Terminated for
    the duration. Returns {signal: previous handler} to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    caught = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            caught[sig] = signal.signal(sig, _raise_terminated)
    return caught


def _restore(caught):
    for sig, handler in caught.items():
        signal.signal(sig, handler)

def save_figure(fig, path, **savefig_args):
    """A matplotlib figure saved as path through replacing: a failed or
    interrupted save leaves the previous image. The format comes from the
    extension, as savefig(path) takes it (png without one); one matplotlib
    does not know is its ValueError."""
    fmt = os.path.splitext(path)[1][1:].lower() or "png"
    with replacing(path) as f:
        fig.savefig(f, format=fmt, **savefig_args)
