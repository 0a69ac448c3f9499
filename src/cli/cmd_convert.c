/* coop convert: any supported trace format to coop's text trace. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_getopt.h"
#include "cli/commands.h"
#include "status.h"
#include "trace/trace.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: coop convert [--device N] [--verbose] IN OUT\n"
                 "\n"
                 "Writes the trace IN as a coop text trace (traces/README.md) to OUT.\n"
                 "IN may be a PyTorch memory snapshot pickle, a coop text trace, a minimalloc\n"
                 "CSV or a DTR op log, plain or gzip-compressed: the format is detected from\n"
                 "the content. OUT is compressed if it ends in .gz; '-' writes to stdout.\n"
                 "A file OUT appears only when complete (written to a temporary file beside\n"
                 "it, then renamed); a symbolic link OUT stays one, its target is replaced.\n"
                 "\n"
                 "options:\n"
                 "  --device N   snapshots: read device N's history (default: the first\n"
                 "               device with events)\n"
                 "  --verbose    print what was converted to stderr\n"
                 "  -h, --help   show this help\n"
                 "\n"
                 "exit status: 0 converted, 1 OUT could not be written, 2 usage error or bad IN\n");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int parse_device(const char *text, int *device)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 1 << 16)
        return -1;
    *device = (int)v;
    return 0;
}

/* The file OUT names, through symbolic links, malloc'ed: the temporary file
 * goes beside it and the rename replaces it, not the link (which a rename
 * onto OUT turned into a regular file). NULL with errno set on failure
 * (ENOENT for a link to nothing). */
static char *output_target(const char *out_path)
{
    char *real = realpath(out_path, NULL);
    if (real || errno != ENOENT)
        return real;
    struct stat st;
    if (lstat(out_path, &st) == 0 && S_ISLNK(st.st_mode)) {
        errno = ENOENT;
        return NULL;
    }
    return strdup(out_path); /* a new file (or a missing directory: said later) */
}

/* Writes to a fresh temporary file beside OUT and renames it over OUT, so a
 * regular file OUT is never half-written. The name comes from mkstemp: a
 * fixed OUT.tmp overwrote whatever had that name. */
static int write_output(const trace *t, const char *out_path)
{
    struct stat st;
    int special = stat(out_path, &st) == 0 && !S_ISREG(st.st_mode);
    /* standard output, a device or a pipe: nothing to rename */
    if (!strcmp(out_path, "-") || special) {
        if (trace_write_text(t, out_path) != COOP_OK) {
            fprintf(stderr, "coop convert: %s\n", coop_last_error());
            return 1;
        }
        return 0;
    }
    char *target = output_target(out_path);
    if (!target) {
        fprintf(stderr, "coop convert: %s: cannot write: %s\n", out_path,
                errno == ENOENT ? "a symbolic link to a file that does not exist"
                                : strerror(errno));
        return 1;
    }
    /* the new file gets the old one's permissions, or a new file's */
    mode_t mode;
    if (stat(target, &st) == 0) {
        mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    const char *slash = strrchr(target, '/');
    int dir_len = slash ? (int)(slash - target) + 1 : 0;
    size_t n = strlen(target) + sizeof ".XXXXXX" + 1;
    char *tmp = malloc(n);
    if (!tmp) {
        fprintf(stderr, "coop convert: out of memory\n");
        free(target);
        return 1;
    }
    /* DIR/.NAME.XXXXXX: hidden, in OUT's directory (rename stays on one
     * file system) */
    snprintf(tmp, n, "%.*s.%s.XXXXXX", dir_len, target, target + dir_len);
    int rc = 0;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "coop convert: %s: cannot write: %s\n", out_path, strerror(errno));
        rc = 1;
    } else {
        if (fchmod(fd, mode) != 0)
            fprintf(stderr, "coop convert: %s: cannot set the mode of %s: %s\n", out_path, tmp,
                    strerror(errno));
        close(fd);
        if (trace_write_text_to(t, tmp, ends_with(out_path, ".gz")) != COOP_OK) {
            fprintf(stderr, "coop convert: %s\n", coop_last_error());
            unlink(tmp);
            rc = 1;
        } else if (rename(tmp, target) != 0) {
            fprintf(stderr, "coop convert: %s: cannot rename %s: %s\n", out_path, tmp,
                    strerror(errno));
            unlink(tmp);
            rc = 1;
        }
    }
    free(tmp);
    free(target);
    return rc;
}

int cmd_convert(int argc, char **argv)
{
    /* getopt_long, as replay and sim: --device=N, -- before a file named
     * like an option, and options after the paths work here too */
    static const struct option long_options[] = {
        {"device", required_argument, NULL, 'd'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int device = -1, verbose = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":hv", long_options, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (parse_device(optarg, &device) != 0) {
                fprintf(stderr, "coop convert: --device '%s' is not a device number (0 to 65536)\n",
                        optarg);
                return 2;
            }
            break;
        case 'v':
            verbose = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            cli_getopt_error("coop convert", c, argv);
            return 2;
        default:
            cli_getopt_error("coop convert", c, argv);
            usage(stderr);
            return 2;
        }
    }
    int num_paths = argc - optind;
    if (num_paths > 2) {
        fprintf(stderr, "coop convert: too many arguments\n");
        usage(stderr);
        return 2;
    }
    char *const *paths = argv + optind;
    if (num_paths != 2) {
        fprintf(stderr, "coop convert: %s\n",
                num_paths ? "missing OUT, the file to write ('-' for standard output)"
                          : "missing IN and OUT");
        usage(stderr);
        return 2;
    }
    if (!strcmp(paths[0], "-")) { /* readers need a file: pickles are read whole, gzip sniffed */
        fprintf(stderr, "coop convert: IN cannot be '-': standard input is not read, give a "
                        "file\n");
        return 2;
    }

    trace_format format;
    trace t;
    coop_status st = trace_detect_format(paths[0], &format);
    if (st == COOP_OK && device >= 0 && format != TRACE_FORMAT_PICKLE)
        st = coop_set_error(COOP_ERR_INVALID, "%s: --device applies to PyTorch snapshots only",
                            paths[0]);
    if (st == COOP_OK)
        st = format == TRACE_FORMAT_PICKLE ? trace_read_pickle_device(paths[0], device, &t)
                                           : trace_read(paths[0], &t);
    if (st != COOP_OK) {
        fprintf(stderr, "coop convert: %s\n", coop_last_error());
        return 2;
    }
    int rc = write_output(&t, paths[1]);
    if (rc == 0 && verbose)
        fprintf(stderr,
                "coop convert: %s (%s): %zu events, %u ids, %zu live at start, %zu final "
                "segments -> %s\n",
                paths[0], trace_format_name(format), t.num_events, t.num_ids, t.num_live_at_start,
                t.num_final_segments, paths[1]);
    trace_free(&t);
    return rc;
}
