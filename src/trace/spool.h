/*
 * Pipes given as traces. Choosing a reader peeks at a file's first bytes and
 * the reader then opens it again, and a pipe (a FIFO, `<(zcat t.gz)`,
 * /dev/stdin under `|`) can be read only once. So a pipe is read once, whole,
 * into an unlinked temporary file, and every later open of its name in this
 * process reads that copy from its first byte. Error messages keep naming
 * the pipe as the user gave it. Regular files are never copied.
 */
#ifndef COOP_TRACE_SPOOL_H
#define COOP_TRACE_SPOOL_H

#include <stdint.h>

#include "coop.h"

/* The most bytes (as they come, compressed or not) kept of one pipe: the
 * copy takes disk space in $TMPDIR, so a runaway writer is stopped. */
#define TRACE_SPOOL_MAX ((uint64_t)4 << 30)

/* For tests: the limit in force, TRACE_SPOOL_MAX unless a test lowers it to
 * reach it with a few bytes. Set it while no pipe is being kept. */
extern uint64_t trace_spool_limit;

/* For tests: the directory through which a kept copy is opened again with
 * an offset of its own, "/proc/self/fd"; a test names a missing one to take
 * the path used where /proc is not mounted. Set it while no copy is open. */
extern const char *trace_spool_fd_dir;

/* For tests: if set, called (under the spool's lock) when trace_spool_keep
 * finds path being copied by another thread and is about to wait for that
 * copy. NULL otherwise. */
extern void (*trace_spool_wait_hook)(const char *path);

/* If path names a FIFO whose copy is not kept yet (or is "/dev/stdin" on a
 * pipe or a socket, which is then read through descriptor 0), reads all of it into a
 * temporary file in $TMPDIR (else /tmp), unlinked at once so that nothing
 * is left behind however the process ends, and keeps it under path. Any
 * other path (a regular file, a device, a missing file): nothing is done,
 * COOP_OK. Errors (COOP_ERR_INVALID; the copy is not kept): "PATH: cannot
 * open: reason", "PATH: read error: reason", "PATH: a pipe of more than
 * LIMIT bytes ..." (trace_spool_limit), "PATH: cannot keep a copy of the pipe in DIR:
 * reason; set TMPDIR to ..." (a full disk, say). Out of host memory: COOP_ERR_HOST_NOMEM.
 * A path kept already, or being copied by another thread (which is waited
 * for), is not read again: its copy is shared, and kept until every
 * successful trace_spool_keep of it is matched by a trace_spool_drop; when
 * the copy waited for fails, its error is this call's too. The wait lasts
 * as long as the copy: a pipe whose writer never closes it holds every
 * keeper of its name, as it would hold one reader of it. The copying thread
 * must not be cancelled (nothing in coop cancels threads): its waiters would
 * wait for ever. */
coop_status trace_spool_keep(const char *path);

/* A new read-only descriptor on path's kept copy in *fd, at its first
 * byte, with an offset of its own (without /proc: on a new unlinked copy of
 * the copy, in the kept copy's directory), which the caller closes; *fd -1
 * and COOP_OK when no copy of path is kept (path is then opened by name).
 * Errors, when a copy is kept but cannot be opened (*fd -1; the caller must
 * not open path by name then: the pipe's writer is gone): "PATH: cannot
 * open its kept copy: reason" (no descriptor left), "PATH: cannot keep
 * another copy of the pipe in DIR (/proc/self/fd, to reopen the first, is
 * missing): reason; set TMPDIR to ..." (COOP_ERR_INVALID); out of host
 * memory: "PATH: out of memory" (COOP_ERR_HOST_NOMEM). */
coop_status trace_spool_open(const char *path, int *fd);

/* Undoes one successful trace_spool_keep(path); the last one forgets the
 * copy, which frees its disk space once no descriptor from trace_spool_open
 * is open on it. Nothing when none is kept. */
void trace_spool_drop(const char *path);

#endif
