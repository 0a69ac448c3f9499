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
#include "trace/spool.h"

#define COPY_CHUNK ((size_t)1 << 16)

uint64_t trace_spool_limit = TRACE_SPOOL_MAX;

typedef struct kept_pipe {
    char *path; /* the name the user gave */
    int fd;     /* the unlinked copy */
} kept_pipe;

/* A handful at most (one per pipe on a command line), so a list searched
 * by name is enough. Readers may run on several threads (tests do). */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static kept_pipe *kept;
static size_t num_kept, cap_kept;

static kept_pipe *find_locked(const char *path)
{
    for (size_t i = 0; i < num_kept; i++)
        if (!strcmp(kept[i].path, path))
            return &kept[i];
    return NULL;
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
            st = coop_set_error(COOP_ERR_INVALID, "%s: cannot keep a copy of the pipe in %s: %s",
                                path, dir, strerror(errno));
            break;
        }
    }
    free(buf);
    return st;
}

/* Makes room for one more kept pipe; COOP_ERR_HOST_NOMEM when there is none. */
static coop_status reserve_locked(const char *path)
{
    if (num_kept < cap_kept)
        return COOP_OK;
    size_t cap = cap_kept ? cap_kept * 2 : 4;
    kept_pipe *grown = realloc(kept, cap * sizeof *grown);
    if (!grown)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    kept = grown;
    cap_kept = cap;
    return COOP_OK;
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

/* Reads the FIFO at path (descriptor 0 when from_stdin) into a new unlinked
 * file in dir; its descriptor in *out. */
static coop_status copy_to_temp(const char *path, int from_stdin, const char *dir, int *out)
{
    *out = -1;
    /* The pipe first: if no copy can be made, its writer is not left
     * waiting for a reader, it sees the pipe closed. */
    int in =
        from_stdin ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) : open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    size_t template_len = strlen(dir) + sizeof "/coop-pipe-XXXXXX";
    char *template = malloc(template_len);
    if (!template) {
        close(in);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    }
    snprintf(template, template_len, "%s/coop-pipe-XXXXXX", dir);
    int fd = mkostemp(template, O_CLOEXEC);
    int err = errno;
    if (fd >= 0)
        unlink(template); /* the descriptor keeps it; nothing is left at exit */
    free(template);
    coop_status st =
        fd < 0 ? coop_set_error(COOP_ERR_INVALID, "%s: cannot keep a copy of the pipe in %s: %s",
                                path, dir, strerror(err))
               : copy_pipe(in, fd, path, dir);
    close(in);
    if (st != COOP_OK) {
        if (fd >= 0)
            close(fd);
        return st;
    }
    *out = fd;
    return COOP_OK;
}

coop_status trace_spool_keep(const char *path)
{
    struct stat sb;
    int from_stdin = stdin_stream(path);
    if (!from_stdin && (stat(path, &sb) != 0 || !S_ISFIFO(sb.st_mode)))
        return COOP_OK; /* files are opened by name; a missing one fails there */
    pthread_mutex_lock(&kept_lock);
    int known = find_locked(path) != NULL;
    pthread_mutex_unlock(&kept_lock);
    if (known)
        return COOP_OK;
    /* The copy is made unlocked: it lasts as long as the writer takes, and
     * other threads' opens of other names must not wait for it. */
    int fd;
    coop_status st = copy_to_temp(path, from_stdin, temp_dir(), &fd);
    if (st != COOP_OK)
        return st;
    char *name = strdup(path);
    pthread_mutex_lock(&kept_lock);
    if (!name) {
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    } else if (!find_locked(path)) { /* else another thread kept it meanwhile */
        st = reserve_locked(path);
        if (st == COOP_OK) {
            kept[num_kept++] = (kept_pipe){name, fd};
            name = NULL;
            fd = -1;
        }
    }
    pthread_mutex_unlock(&kept_lock);
    free(name);
    if (fd >= 0)
        close(fd);
    return st;
}

int trace_spool_open(const char *path)
{
    pthread_mutex_lock(&kept_lock);
    kept_pipe *k = find_locked(path);
    int fd = -1;
    if (k) {
        /* Through /proc the copy opens with an offset of its own, so two
         * readers of one name (detection, then the reader) cannot disturb
         * each other; without /proc a duplicate shares the offset, which
         * is rewound here and suffices for opens made one after another. */
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", k->fd);
        fd = open(self, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fd = fcntl(k->fd, F_DUPFD_CLOEXEC, 0);
            if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
                close(fd);
                fd = -1;
            }
        }
    }
    pthread_mutex_unlock(&kept_lock);
    return fd;
}

void trace_spool_drop(const char *path)
{
    pthread_mutex_lock(&kept_lock);
    kept_pipe *k = find_locked(path);
    if (k) {
        close(k->fd);
        free(k->path);
        *k = kept[--num_kept];
    }
    pthread_mutex_unlock(&kept_lock);
}
