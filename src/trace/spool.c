/* Pipes kept whole in unlinked temporary files (spool.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "trace/input.h"
#include "trace/spool.h"

#define COPY_CHUNK ((size_t)1 << 16)

/* The way out of a failed copy: the directory comes from $TMPDIR, which a
 * user reading a pipe may not know is used at all. */
#define NO_COPY_HINT "; set TMPDIR to a writable directory with room, or give the trace as a file"

uint64_t trace_spool_limit = TRACE_SPOOL_MAX;
const char *trace_spool_fd_dir = "/proc/self/fd";
void (*trace_spool_wait_hook)(const char *path);

typedef struct kept_pipe {
    char *path;         /* the name the user gave */
    char *dir;          /* the copy's directory */
    int fd;             /* the unlinked copy; -1 while it is being made */
    unsigned keepers;   /* trace_spool_keep calls not dropped yet, waiters included */
    coop_status failed; /* the copy's failure, for the keepers that waited on it */
    char *why;          /* its message (NULL: no memory for it) */
} kept_pipe;

/* A handful at most (one per pipe on a command line), so a list searched
 * by name is enough. Readers may run on several threads (tests do): a
 * keeper that finds its name being copied waits on `copied` for that copy,
 * holding the entry (hence a list of pointers: entries stay put). */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t copied = PTHREAD_COND_INITIALIZER;
static kept_pipe **kept;
static size_t num_kept, cap_kept;

static kept_pipe *find_locked(const char *path)
{
    for (size_t i = 0; i < num_kept; i++)
        if (!strcmp(kept[i]->path, path))
            return kept[i];
    return NULL;
}

/* Takes k off the list (it may be off already: a failed copy). The list
 * is freed once empty: a keep that fails for want of memory, or a process
 * done with its pipes, holds no block of the spool's. */
static void unlist_locked(const kept_pipe *k)
{
    for (size_t i = 0; i < num_kept; i++)
        if (kept[i] == k) {
            kept[i] = kept[--num_kept];
            break;
        }
    if (num_kept == 0) {
        free(kept);
        kept = NULL;
        cap_kept = 0;
    }
}

/* One keeper less; the last one frees the entry and closes the copy. */
static void release_locked(kept_pipe *k)
{
    if (--k->keepers > 0)
        return;
    unlist_locked(k);
    if (k->fd >= 0)
        close(k->fd);
    free(k->path);
    free(k->dir);
    free(k->why);
    free(k);
}

static const char *temp_dir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && dir[0] ? dir : "/tmp";
}

/* Writes all of buf, retrying short writes and interrupted calls. */
static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copies everything from the pipe `in` to `out`; on failure sets the
 * message, naming path (and dir for the copy's side). */
static coop_status copy_pipe(int in, int out, const char *path, const char *dir)
{
    char *buf = malloc(COPY_CHUNK);
    if (!buf)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory (copying the pipe)", path);
    uint64_t total = 0;
    coop_status st = COOP_OK;
    for (;;) {
        ssize_t got = read(in, buf, COPY_CHUNK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = coop_set_error(COOP_ERR_INVALID, "%s: read error: %s", path, strerror(errno));
            break;
        }
        if (got == 0)
            break;
        total += (uint64_t)got;
        if (total > trace_spool_limit) {
            st = coop_set_error(COOP_ERR_INVALID,
                                "%s: a pipe of more than %llu bytes: its copy in %s would be "
                                "too large; write it to a file first",
                                path, (unsigned long long)trace_spool_limit, dir);
            break;
        }
        if (write_all(out, buf, (size_t)got) != 0) {
            st = coop_set_error(COOP_ERR_INVALID,
                                "%s: cannot keep a copy of the pipe in %s: %s" NO_COPY_HINT, path,
                                dir, strerror(errno));
            break;
        }
    }
    free(buf);
    return st;
}

/* A new entry for path, being copied into dir by the caller, who is its
 * one keeper; COOP_ERR_HOST_NOMEM when there is no memory for it. */
static coop_status add_locked(const char *path, const char *dir, kept_pipe **out)
{
    kept_pipe *k = malloc(sizeof *k);
    char *name = strdup(path), *where = strdup(dir);
    kept_pipe **grown = NULL;
    size_t cap = cap_kept;
    if (k && name && where && num_kept == cap_kept) { /* last: nothing to undo after it */
        cap = cap_kept ? cap_kept * 2 : 4;
        grown = realloc(kept, cap * sizeof *grown);
    }
    if (!k || !name || !where || (num_kept == cap_kept && !grown)) {
        free(k);
        free(name);
        free(where);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    }
    if (grown) {
        kept = grown;
        cap_kept = cap;
    }
    *k = (kept_pipe){.path = name, .dir = where, .fd = -1, .keepers = 1};
    kept[num_kept++] = k;
    *out = k;
    return COOP_OK;
}

/* Another thread is copying k's pipe (or has): waits for the copy, which
 * this keeper then shares, or for its failure, which it reports too. */
static coop_status wait_locked(kept_pipe *k)
{
    if (k->fd < 0 && k->failed == COOP_OK && trace_spool_wait_hook)
        trace_spool_wait_hook(k->path);
    while (k->fd < 0 && k->failed == COOP_OK)
        pthread_cond_wait(&copied, &kept_lock);
    if (k->fd >= 0)
        return COOP_OK;
    coop_status st = k->why ? coop_set_error(k->failed, "%s", k->why)
                            : coop_set_error(k->failed, "%s: its copy failed", k->path);
    release_locked(k);
    return st;
}

/* Whether path is '-' (as /dev/stdin) on a pipe or a socket. That stream
 * is read through descriptor 0 itself: reopening it by name fails for a
 * socket (ENXIO: a service's or a harness's stdin) and for a pipe that
 * another user's shell made (EACCES, under sudo -u). */
static int stdin_stream(const char *path)
{
    struct stat sb;
    return !strcmp(path, "/dev/stdin") && fstat(STDIN_FILENO, &sb) == 0 &&
           (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode));
}

/* A new unlinked file in dir (the descriptor keeps it, so nothing is left
 * however the process ends); -1 and errno when none can be made. */
static int new_temp(const char *dir)
{
    size_t template_len = strlen(dir) + sizeof "/coop-pipe-XXXXXX";
    char *template = malloc(template_len);
    if (!template) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(template, template_len, "%s/coop-pipe-XXXXXX", dir);
    int fd = mkostemp(template, O_CLOEXEC);
    int err = errno;
    if (fd >= 0)
        unlink(template);
    free(template);
    errno = err;
    return fd;
}

/* Reads the FIFO at path (descriptor 0 when from_stdin) into a new unlinked
 * file in dir; its descriptor in *out. */
static coop_status copy_to_temp(const char *path, int from_stdin, const char *dir, int *out)
{
    *out = -1;
    /* The pipe first: if no copy can be made, its writer is not left
     * waiting for a reader, it sees the pipe closed. */
    int in =
        from_stdin ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) : open(path, O_RDONLY | O_CLOEXEC);
    char shown[TRACE_INPUT_SHOWN_PATH];
    if (in < 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s",
                              trace_input_shown_path(shown, path), strerror(errno));
    int fd = new_temp(dir);
    int err = errno;
    /* Out of host memory is no fault of the directory: no TMPDIR hint. */
    coop_status st =
        fd >= 0 ? copy_pipe(in, fd, path, dir)
        : err == ENOMEM
            ? coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path)
            : coop_set_error(COOP_ERR_INVALID,
                             "%s: cannot keep a copy of the pipe in %s: %s" NO_COPY_HINT, path, dir,
                             strerror(err));
    close(in);
    if (st != COOP_OK) {
        if (fd >= 0)
            close(fd);
        return st;
    }
    *out = fd;
    return COOP_OK;
}

/* Without /proc: a new unlinked copy in dir of the kept copy `from`, at its
 * first byte. pread leaves `from`'s offset, which duplicates share, alone.
 * -1 and errno when it cannot be made. */
static int copy_again(int from, const char *dir)
{
    int fd = new_temp(dir);
    char *buf = fd >= 0 ? malloc(COPY_CHUNK) : NULL;
    if (!buf) {
        int err = fd >= 0 ? ENOMEM : errno;
        if (fd >= 0)
            close(fd);
        errno = err;
        return -1;
    }
    off_t at = 0;
    ssize_t got;
    for (;;) {
        got = pread(from, buf, COPY_CHUNK, at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || write_all(fd, buf, (size_t)got) != 0)
            break;
        at += got;
    }
    int err = errno;
    free(buf);
    if (got != 0 || lseek(fd, 0, SEEK_SET) != 0) {
        err = got != 0 ? err : errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

coop_status trace_spool_keep(const char *path)
{
    struct stat sb;
    int from_stdin = stdin_stream(path);
    if (!from_stdin && (stat(path, &sb) != 0 || !S_ISFIFO(sb.st_mode)))
        return COOP_OK; /* files are opened by name; a missing one fails there */
    pthread_mutex_lock(&kept_lock);
    kept_pipe *k = find_locked(path);
    coop_status st;
    if (k) { /* kept, or being copied by another thread: shared */
        k->keepers++;
        st = wait_locked(k);
        pthread_mutex_unlock(&kept_lock);
        return st;
    }
    st = add_locked(path, temp_dir(), &k);
    pthread_mutex_unlock(&kept_lock);
    if (st != COOP_OK)
        return st;
    /* The copy is made unlocked: it lasts as long as the writer takes, and
     * other threads' opens of other names must not wait for it. */
    int fd;
    st = copy_to_temp(path, from_stdin, k->dir, &fd);
    pthread_mutex_lock(&kept_lock);
    if (st == COOP_OK) {
        k->fd = fd;
    } else { /* off the list: a later keeper starts afresh */
        k->failed = st;
        k->why = strdup(coop_last_error());
        unlist_locked(k);
        release_locked(k);
    }
    pthread_cond_broadcast(&copied);
    pthread_mutex_unlock(&kept_lock);
    return st;
}

coop_status trace_spool_open(const char *path, int *out)
{
    *out = -1;
    pthread_mutex_lock(&kept_lock);
    kept_pipe *k = find_locked(path);
    int fd = -1, from = -1, err = 0;
    char *dir = NULL;
    if (!k || k->fd < 0) { /* not kept (or not by this caller: being copied) */
        pthread_mutex_unlock(&kept_lock);
        return COOP_OK;
    }
    /* Through /proc the copy opens with an offset of its own, so that
     * readers of one name (detection, then the reader; other threads)
     * cannot disturb each other. */
    char self[300];
    snprintf(self, sizeof self, "%s/%d", trace_spool_fd_dir, k->fd);
    fd = open(self, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { /* a duplicate would share the offset: a copy of the copy */
        from = fcntl(k->fd, F_DUPFD_CLOEXEC, 0);
        err = errno;
        dir = from >= 0 ? strdup(k->dir) : NULL;
    }
    pthread_mutex_unlock(&kept_lock);
    if (fd >= 0) {
        *out = fd;
        return COOP_OK;
    }
    /* From here on the pipe's name must not be opened instead: its writer
     * is gone, so the caller would wait for ever, or read another stream. */
    if (from < 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open its kept copy: %s", path,
                              strerror(err));
    fd = dir ? copy_again(from, dir) : (errno = ENOMEM, -1); /* unlocked, as the first copy */
    err = errno;
    close(from);
    coop_status st = COOP_OK;
    if (fd >= 0)
        *out = fd;
    else if (err == ENOMEM)
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    else
        st = coop_set_error(COOP_ERR_INVALID,
                            "%s: cannot keep another copy of the pipe in %s (%s, to reopen the "
                            "first, is missing): %s" NO_COPY_HINT,
                            path, dir, trace_spool_fd_dir, strerror(err));
    free(dir);
    return st;
}

void trace_spool_drop(const char *path)
{
    pthread_mutex_lock(&kept_lock);
    kept_pipe *k = find_locked(path);
    if (k && k->fd >= 0) /* one being copied is not this caller's */
        release_locked(k);
    pthread_mutex_unlock(&kept_lock);
}
