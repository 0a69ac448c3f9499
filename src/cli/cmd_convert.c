/* coop convert: any supported trace format to coop's text trace. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_getopt.h"
#include "cli/cli_inputs.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "status.h"
#include "trace/input.h"
#include "trace/trace.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: coop convert [--device N] [--verbose] IN OUT\n"
                 "\n"
                 "Writes the trace IN as a coop text trace (traces/README.md) to OUT.\n"
                 "IN may be a PyTorch memory snapshot pickle, a coop text trace, a minimalloc\n"
                 "CSV or a DTR op log, plain or gzip-compressed: the format is detected from\n"
                 "the content; IN may be a pipe, or '-' for standard input. OUT is\n"
                 "compressed if it ends in .gz; '-' writes to stdout.\n"
                 "A file OUT appears only when complete (written to a temporary file beside\n"
                 "it, then renamed); a symbolic link OUT stays one, its target is replaced.\n"
                 "\n"
                 "options:\n"
                 "  --device N     snapshots: read device N's history (default: the first\n"
                 "                 device with events; stderr says so when others have some)\n"
                 "  -v, --verbose  print what was converted to stderr\n"
                 "  -h, --help     show this help\n"
                 "\n"
                 "Exit status: 0 converted, 1 writing OUT failed or host memory ran out,\n"
                 "2 usage error, bad IN or an OUT that cannot be opened\n");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Writes through cli_output: a regular file OUT appears only when complete
 * (a temporary file beside it, renamed over it); standard output, a device
 * or a pipe is written directly. */
static int write_output(const trace *t, const char *out_path)
{
    if (!strcmp(out_path, "-")) {
        if (trace_write_text(t, out_path) != COOP_OK) {
            fprintf(stderr, "coop convert: %s\n", coop_last_error());
            return 1;
        }
        return 0;
    }
    cli_output o;
    errno = 0; /* ENOMEM after a failure: no host memory */
    const char *why = cli_output_open(&o, out_path);
    if (why) {
        /* an OUT that cannot be opened (a directory, a missing directory,
         * no permission) is a bad argument, 2, as replay's --timeline;
         * no host memory is the work failing (1), as a write that fails */
        int rc = errno == ENOMEM ? 1 : 2;
        fprintf(stderr, "coop convert: %s: cannot write: %s\n", out_path, why);
        return rc;
    }
    if (!o.tmp) { /* a device or a pipe: written directly */
        if (trace_write_text(t, out_path) != COOP_OK) {
            fprintf(stderr, "coop convert: %s\n", coop_last_error());
            return 1;
        }
        return 0;
    }
    close(o.fd);
    if (trace_write_text_to(t, o.tmp, ends_with(out_path, ".gz")) != COOP_OK) {
        /* the writer names the temporary file, which is removed: say OUT */
        const char *msg = coop_last_error();
        size_t n = strlen(o.tmp);
        bool named = !strncmp(msg, o.tmp, n);
        fprintf(stderr, "coop convert: %s%s\n", named ? out_path : "", named ? msg + n : msg);
        cli_output_discard(&o);
        return 1;
    }
    why = cli_output_commit(&o);
    if (why) {
        fprintf(stderr, "coop convert: %s: cannot write: %s\n", out_path, why);
        return 1;
    }
    return 0;
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
            if (!cli_parse_device("coop convert", optarg, &device))
                return 2;
            break;
        case 'v':
            verbose = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            cli_getopt_error("coop convert", c, argv, long_options);
            return 2;
        default:
            cli_getopt_error("coop convert", c, argv, long_options);
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
    if (!cli_inputs_name_stdin("coop convert", argv + optind, 1))
        return 2;

    /* the converted text would replace the input, a snapshot pickle lost
     * for good, and no user means that */
    if (cli_input_named_by(paths[1], paths, 1)) {
        fprintf(stderr,
                "coop convert: %s is the input %s: it would be replaced by its conversion; "
                "give another OUT\n",
                paths[1], paths[0]);
        return 2;
    }
    trace_format format = TRACE_FORMAT_TEXT;
    trace t = {0};
    /* a directory or a missing file in the words sim and replay use */
    coop_status st = trace_input_check(paths[0]);
    if (st == COOP_OK)
        st = cli_read_trace(paths[0], device, &t, &format);
    if (st != COOP_OK) { /* no host memory is the work failing (1), as in replay and sim */
        fprintf(stderr, "coop convert: %s\n", coop_last_error());
        return st == COOP_ERR_HOST_NOMEM ? 1 : 2;
    }
    int rc = write_output(&t, paths[1]);
    int snapshot = format == TRACE_FORMAT_PICKLE;
    /* OUT holds one device's history: the others' events are not in it,
     * which a user picking none should hear */
    if (rc == 0 && device < 0)
        cli_note_device_read("coop convert", paths[0], t.snapshot_device,
                             t.snapshot_devices_with_events, "--device N reads another");
    if (rc == 0 && verbose) {
        char device_read[64] = "";
        if (snapshot)
            snprintf(device_read, sizeof device_read, ", device %zu of %zu", t.snapshot_device,
                     t.snapshot_num_devices);
        fprintf(stderr,
                "coop convert: %s (%s%s): %zu events, %u ids, %zu live at start, %zu final "
                "segments -> %s\n",
                paths[0], trace_format_name(format), device_read, t.num_events, t.num_ids,
                t.num_live_at_start, t.num_final_segments, paths[1]);
    }
    trace_free(&t);
    return rc;
}
