/* Input files checked before a command's work (cli_inputs.h). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_inputs.h"
#include "status.h"
#include "trace/input.h"
#include "trace/spool.h"
#include "trace/text_number.h"

/* Whether paths[i] is a pipe that an earlier path names too: the first
 * read takes all of it, and a second open of a named FIFO whose writer is
 * gone waits for a new writer for ever ('-' twice read as an empty file). */
static bool a_pipe_again(const char *prog, char *const *paths, size_t i)
{
    struct stat here, there;
    if (stat(paths[i], &here) != 0 || !(S_ISFIFO(here.st_mode) || S_ISSOCK(here.st_mode)))
        return false;
    for (size_t j = 0; j < i; j++)
        if (stat(paths[j], &there) == 0 && there.st_dev == here.st_dev &&
            there.st_ino == here.st_ino) {
            fprintf(stderr,
                    "%s: %s: a pipe named twice (as %s before it): a pipe can be read once; "
                    "give it once, or write it to a file first\n",
                    prog, paths[i], paths[j]);
            return true;
        }
    return false;
}

const char *cli_input_named_by(const char *out, char *const *paths, size_t n)
{
    struct stat o, in;
    if (!strcmp(out, "-") || stat(out, &o) != 0)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (stat(paths[i], &in) == 0 && in.st_dev == o.st_dev && in.st_ino == o.st_ino)
            return paths[i];
    return NULL;
}

bool cli_inputs_readable(const char *prog, char *const *paths, size_t n)
{
    bool all = true;
    for (size_t i = 0; i < n; i++)
        if (trace_input_check(paths[i]) != COOP_OK) {
            fprintf(stderr, "%s: %s\n", prog, coop_last_error());
            all = false;
        } else if (a_pipe_again(prog, paths, i)) {
            all = false;
        }
    return all;
}

bool cli_inputs_name_stdin(const char *prog, char **paths, size_t n)
{
    static char stdin_name[] = "/dev/stdin";
    for (size_t i = 0; i < n; i++)
        if (!strcmp(paths[i], "-")) {
            /* A terminal would be read twice (the format's peek, then the
             * reader): what was typed first is lost, and the command waits
             * for more. A '-' there is a slip: gzip refuses one too. */
            if (isatty(STDIN_FILENO)) {
                fprintf(
                    stderr,
                    "%s: '-' is standard input, a terminal here: pipe a trace in, or give a file\n",
                    prog);
                return false;
            }
            paths[i] = stdin_name;
        }
    return true;
}

void cli_note_device_read(const char *prog, const char *path, size_t device,
                          size_t devices_with_events, const char *another)
{
    if (devices_with_events < 2)
        return;
    size_t others = devices_with_events - 1;
    fprintf(stderr,
            "%s: %s: read device %zu, the first with events; %zu other device%s events too (%s)\n",
            prog, path, device, others, others == 1 ? " has" : "s have", another);
}

bool cli_parse_device(const char *prog, const char *text, int *device)
{
    uint64_t v;
    if (text_parse_u64(text, &v) != TEXT_NUMBER_OK || v > 1 << 16) {
        fprintf(stderr,
                "%s: --device '%s' is not a device number (0 to 65536, decimal or 0x hex)\n", prog,
                text);
        return false;
    }
    *device = (int)v;
    return true;
}

coop_status cli_read_trace(const char *path, int device, trace *out, trace_format *format)
{
    *out = (trace){0};
    trace_format detected;
    coop_status st = trace_detect_format(path, &detected);
    if (st != COOP_OK)
        return st;
    if (format)
        *format = detected;
    return cli_read_trace_as(path, device, detected, out);
}

coop_status cli_read_trace_as(const char *path, int device, trace_format format, trace *out)
{
    *out = (trace){0};
    coop_status st;
    if (device >= 0 && format != TRACE_FORMAT_PICKLE)
        st = coop_set_error(COOP_ERR_INVALID, "%s: --device applies to PyTorch snapshots only",
                            path);
    else /* the format known: read without detecting it again */
        st = format == TRACE_FORMAT_PICKLE ? trace_read_pickle_device(path, device, out)
                                           : trace_read_as(path, format, out);
    trace_spool_drop(path); /* a pipe's copy, read whole now */
    return st;
}
