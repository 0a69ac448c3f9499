/* Output files and standard output of the coop command; see cli_output.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_output.h"

/* The file path names, through symbolic links, malloc'ed: the temporary
 * file goes beside it and the rename replaces it, not the link (which a
 * rename onto path turned into a regular file). NULL with errno set on
 * failure (ENOENT for a link to nothing). */
static char *output_target(const char *path)
{
    char *real = realpath(path, NULL);
    if (real || errno != ENOENT)
        return real;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        errno = ENOENT;
        return NULL;
    }
    return strdup(path); /* a new file (or a missing directory: mkstemp says) */
}

/* The temporary file being written, for the handler below: a command ended
 * by SIGINT, SIGTERM, SIGHUP or SIGPIPE (Ctrl-C, a timeout, a closed
 * terminal, `coop replay --timeline F ... | head -1`) left its hidden
 * .NAME.XXXXXX beside the target, one more after every interrupted run. A
 * copy of the name: the handler must not read memory the command frees. */
static char pending_tmp[4096];
static volatile sig_atomic_t pending;
/* The signals after which the file is removed (watch_signals), and which
 * are held while it is made (cli_output_open). */
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
#define NUM_CLEANUP_SIGNALS (sizeof cleanup_signals / sizeof cleanup_signals[0])

static void remove_pending_and_end(int sig)
{
    if (pending)
        unlink(pending_tmp); /* async-signal-safe, as are sigaction and raise */
    /* the default action back (a handler still in place would catch its
     * own raise for ever): the command ends by the signal, with the status
     * the shell expects (130, 143, ...) */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void watch_signals(void)
{
    static bool watching;
    if (watching)
        return;
    watching = true;
    struct sigaction act = {.sa_handler = remove_pending_and_end};
    sigemptyset(&act.sa_mask);
    for (size_t i = 0; i < NUM_CLEANUP_SIGNALS; i++) {
        struct sigaction old;
        /* an ignored signal stays ignored: a background job's SIGINT, nohup's
         * SIGHUP, and a SIGPIPE ignored on purpose (writes then fail, said) */
        if (sigaction(cleanup_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
            sigaction(cleanup_signals[i], &act, NULL);
    }
}

static void set_pending(const char *tmp)
{
    pending = 0;
    size_t n = tmp ? strlen(tmp) + 1 : 0;
    if (!n || n > sizeof pending_tmp)
        return; /* not removed on a signal; every other end still removes it */
    memcpy(pending_tmp, tmp, n);
    watch_signals();
    pending = 1;
}

const char *cli_output_open(cli_output *o, const char *path)
{
    *o = (cli_output){.fd = -1};
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return strerror(EISDIR); /* said before the work, not at the rename */
    if (exists && !S_ISREG(st.st_mode))
        return NULL; /* a device or a pipe: nothing to rename over */
    errno = 0;
    o->target = output_target(path);
    if (!o->target && !errno)
        errno = ENOMEM; /* said as such (cli_output.h) */
    if (!o->target)
        return errno == ENOENT   ? "a symbolic link to a file that does not exist"
               : errno == ENOMEM ? "out of host memory"
                                 : strerror(errno);
    /* the new file gets the old one's permissions, or a new file's */
    mode_t mode;
    if (stat(o->target, &st) == 0) {
        mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    const char *slash = strrchr(o->target, '/');
    int dir_len = slash ? (int)(slash - o->target) + 1 : 0;
    size_t n = strlen(o->target) + sizeof ".XXXXXX" + 1;
    o->tmp = malloc(n);
    if (!o->tmp) {
        cli_output_discard(o);
        errno = ENOMEM;
        return "out of host memory";
    }
    /* DIR/.NAME.XXXXXX: hidden, in the target's directory; a fresh name
     * (a fixed NAME.tmp overwrote whatever had that name) */
    snprintf(o->tmp, n, "%.*s.%s.XXXXXX", dir_len, o->target, o->target + dir_len);
    /* the signals held from before the file exists until the handler knows
     * its name: one arriving in between had ended the command by its
     * default action, the file left behind (seen in cli_outputs_test.sh) */
    sigset_t held, before;
    sigemptyset(&held);
    for (size_t i = 0; i < NUM_CLEANUP_SIGNALS; i++)
        sigaddset(&held, cleanup_signals[i]);
    sigprocmask(SIG_BLOCK, &held, &before);
    o->fd = mkostemp(o->tmp, O_CLOEXEC);
    if (o->fd >= 0)
        set_pending(o->tmp);
    sigprocmask(SIG_SETMASK, &before, NULL); /* a signal held is handled now */
    if (o->fd < 0) {
        int err = errno;
        free(o->tmp);
        o->tmp = NULL;
        cli_output_discard(o);
        return strerror(err);
    }
    if (fchmod(o->fd, mode) != 0) {
        int err = errno;
        close(o->fd);
        cli_output_discard(o);
        return strerror(err);
    }
    return NULL;
}

const char *cli_output_commit(cli_output *o)
{
    const char *why = NULL;
    if (o->tmp && rename(o->tmp, o->target) != 0)
        why = strerror(errno);
    else if (o->tmp) {
        pending = 0; /* renamed: a signal now must not remove a file of that name */
        free(o->tmp);
        o->tmp = NULL; /* renamed: nothing to remove */
    }
    cli_output_discard(o);
    return why;
}

void cli_output_discard(cli_output *o)
{
    if (o->tmp) {
        unlink(o->tmp);
        pending = 0;
    }
    free(o->tmp);
    free(o->target);
    *o = (cli_output){.fd = -1};
}

void cli_reserve_standard_fds(void)
{
    /* read-only for stdout and stderr, write-only for stdin: the stream
     * still fails (EBADF) as the closed descriptor did */
    static const int flags[3] = {O_WRONLY, O_RDONLY, O_RDONLY};
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int got = open("/dev/null", flags[fd]);
            if (got >= 0 && got != fd) /* a lower one was open after all */
                close(got);
        }
}

static int stdout_errno = -1; /* the first failed flush's errno; -1: none */

bool cli_stdout_ok(void)
{
    int before = errno; /* a failed fprintf's reason, when fflush has none */
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return true;
    if (stdout_errno < 0)
        stdout_errno = errno ? errno : before;
    return false;
}

int cli_stdout_finish(const char *name, int rc)
{
    bool ok = cli_stdout_ok();
    /* close too: some file systems (NFS) report a failed write only there */
    errno = 0;
    if (fclose(stdout) != 0 && ok) {
        ok = false;
        stdout_errno = errno;
    }
    if (ok)
        return rc;
    int err = stdout_errno > 0 ? stdout_errno : 0;
    fprintf(stderr, "coop%s%s: writing standard output failed%s%s\n", name ? " " : "",
            name ? name : "", err ? ": " : "", err ? strerror(err) : "");
    return rc ? rc : 1;
}
