/*
 * coop replay: runs allocation traces through coop and its peers side by side
 * and reports peaks, minimum capacity, bytes mapped, fragmentation and speed.
 */
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "byte_size.h"
#include "cli/cli_getopt.h"
#include "cli/cli_inputs.h"
#include "cli/cli_list.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "replay/measure.h"
#include "replay/policy.h"
#include "replay/report.h"
#include "replay/timeline.h"
#include "status.h"
#include "trace/trace.h"

#ifndef COOP_SRCDIR
#define COOP_SRCDIR "."
#endif
/* where make install puts the bundled traces (PKGDATADIR/traces) */
#ifndef COOP_PKGDATADIR
#define COOP_PKGDATADIR "."
#endif

#define DEFAULT_CAPACITY (80ull << 30) /* an 80 GiB device */
#define DEFAULT_PAGE (2ull << 20)      /* NVIDIA's physical page granularity */
#define MAX_CHOICES 16

static void usage(FILE *out)
{
    size_t n;
    const replay_policy_ops *const *all = replay_policy_all(&n);
    fprintf(out,
            "usage: coop replay [--policy LIST] [--json] [--timeline FILE] "
            "[--capacity BYTES]\n"
            "                   [--page BYTES] [--device N] [TRACE ...]\n"
            "\n"
            "Replays allocation traces (PyTorch snapshot pickles, coop text "
            "traces, minimalloc\n"
            "CSV, DTR op logs; .gz read transparently) through several "
            "allocators on a\n"
            "simulated device and compares them. Without TRACE, replays the "
            "bundled traces\n"
            "(%s/traces/*.trace.gz, then the GPU snapshots "
            "*.cuda.pickle.gz;\n"
            "where that source tree is gone, the copies make install put "
            "in\n"
            "%s/traces, or in ../share/coop/traces beside the coop binary).\n"
            "A TRACE may be a pipe, or '-' for standard input.\n"
            "\n"
            "options:\n"
            "  --policy LIST     comma-separated policies (default: all):\n",
            COOP_SRCDIR, COOP_PKGDATADIR);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "                      %-16s %s\n", all[i]->name, all[i]->summary);
    fprintf(out,
            "                      %-16s %s\n"
            "  --json            one JSON object per (trace, policy) line "
            "instead of a table\n"
            "  --timeline FILE   write live and reserved bytes per event and "
            "every block's\n"
            "                    placement (scripts/plot_replay.py draws it); FILE "
            "appears only\n"
            "                    once every trace is measured\n"
            "  --capacity BYTES  device capacity (default 80GiB, below 16PiB; at most 16TiB\n"
            "                    with coop or jemalloc); decimal or 0x hex, suffixes K, M,\n"
            "                    G, T (binary, any case), as COOP_ALLOC_CONF\n"
            "  --page BYTES      page size for coop and coop-segments, a power of "
            "two from 512\n"
            "                    to 16TiB (default 2MiB)\n"
            "  --device N        snapshots: replay device N's history (default: the first\n"
            "                    device with events; stderr says so when others have some);\n"
            "                    every TRACE must then be a PyTorch snapshot\n"
            "  -h, --help        this text\n"
            "\n"
            "Columns (each with its JSON key in docs/replay.md, \"Figures\"): events;\n"
            "live_MiB and reserved_MiB, the peaks of requested bytes live and of device\n"
            "memory held at --capacity (KiB when every trace is small), and res/live, their\n"
            "ratio; min_cap_MiB, a capacity that runs the whole trace where one step less\n"
            "fails (bisection in steps: --page for coop and coop-segments, else 2 MiB; a\n"
            "smaller one may run too), OOM@N where --capacity ran out at event\n"
            "N, and min_cap/live; map_MiB, bytes mapped over the run at min_cap; frag_mean,\n"
            "frag_max: 1 - largest_free/free_bytes at allocation times (mean weighted by\n"
            "events, and max); gmlake = 1 - peak_active/peak_reserved; ns/op, the median\n"
            "time of one malloc or free. Lower is better in all but events; ideal's row is\n"
            "the floor (ratios 1.000, no fragmentation). '-': not measured.\n"
            "Exit status: 0 ok, 1 a policy failed or the results could not be written, "
            "2 usage\n"
            "or input error. A TRACE that cannot be opened is refused before any replay; a\n"
            "bad trace is named and the other traces are still replayed (status 2 at the\n"
            "end; a --timeline file is then not written), as in coop sim.\n",
            "recorded", "what PyTorch's allocator reserved (snapshots with segments)");
}

/* --capacity and --page are below 2^54 bytes (16 PiB): the coop policy's pool
 * reserves 4 times its capacity (at least one page) of address space, and
 * coop refuses sizes of 2^56 or more. Checked here, a value beyond is a
 * usage error naming its option, not a skipped policy blaming another. */
#define MAX_BYTES_OPTION ((uint64_t)1 << 54)

/* --page is at most 2^44 bytes (16 TiB): coop's pool reserves 4 times its
 * capacity, which holds at least one page, and the host backend a page more
 * to align it, so 5 pages of address space in one mmap. A 64-bit Linux
 * process gets 2^47 bytes (128 TiB) from mmap: 5 * 2^44 (80 TiB) fits,
 * 5 * 2^45 does not, and 2^45 to 2^53 passed this check to fail each run
 * as a skipped policy (exit 1). */
#define MAX_PAGE_OPTION ((uint64_t)1 << 44)

/* With coop or jemalloc, --capacity is at most 2^44 bytes (16 TiB): each
 * reserves 4 times its capacity of address space in one mmap (coop a page
 * more to align it, jemalloc 1 GiB more), and a 64-bit Linux process gets
 * 2^47 bytes. The largest mapping measured was 85 TiB, 70 TiB under ASan
 * (2026-11-29): 64 TiB fits both; 32T passed the 2^54 check and then each
 * run skipped them (exit 1). The other policies reserve nothing up front. */
#define MAX_RESERVING_CAPACITY ((uint64_t)1 << 44)

/* Splits LIST into choices: 0, else the exit status, said: 2 for an unknown
 * name or a malformed list, 1 for no host memory to copy it (that was a 2
 * without a word). */
static int parse_policies(const char *list, replay_choice *choices, size_t *count)
{
    *count = 0;
    char *copy = strdup(list);
    if (!copy) {
        fprintf(stderr, "coop replay: --policy: out of host memory\n");
        return 1;
    }
    char *names[MAX_CHOICES];
    int n = cli_split_list(copy, names, MAX_CHOICES, "coop replay", "--policy");
    bool ok = n > 0;
    for (int i = 0; i < n && ok; i++) {
        const replay_policy_ops *ops = replay_policy_find(names[i]);
        if (!ops && strcmp(names[i], "recorded")) {
            fprintf(stderr, "coop replay: unknown policy '%s' (see --help)\n", names[i]);
            ok = false;
            continue;
        }
        /* a second row of one policy measures nothing new (as coop sim) */
        for (int j = 0; j < i && ok; j++)
            if (!strcmp(names[j], names[i])) {
                fprintf(stderr, "coop replay: policy '%s' is listed twice\n", names[i]);
                ok = false;
            }
        if (ok)
            choices[(*count)++] = (replay_choice){.name = ops ? ops->name : "recorded", .ops = ops};
    }
    free(copy);
    return ok ? 0 : 2;
}

static void default_policies(replay_choice *choices, size_t *count)
{
    size_t n;
    const replay_policy_ops *const *all = replay_policy_all(&n);
    *count = 0;
    for (size_t i = 0; i < n; i++)
        choices[(*count)++] = (replay_choice){.name = all[i]->name, .ops = all[i]};
    choices[(*count)++] = (replay_choice){.name = "recorded", .ops = NULL};
}

/* The bundled traces of one folder: the allocation traces recorded on the
 * CPU (*.trace.gz), then the snapshots recorded on a GPU (*.cuda.pickle.gz).
 * True when either matched. */
static bool glob_bundled(const char *dir, glob_t *g)
{
    static const char *const patterns[] = {"*.trace.gz", "*.cuda.pickle.gz"};
    char pattern[PATH_MAX + 32];
    int flags = 0;
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        snprintf(pattern, sizeof pattern, "%s/traces/%s", dir, patterns[i]);
        int rc = glob(pattern, flags, NULL, g);
        if (rc == 0)
            flags = GLOB_APPEND;
        else if (rc != GLOB_NOMATCH)
            break;
    }
    if (flags)
        return true;
    globfree(g);
    return false;
}

/* The bundled traces: the source tree's traces/ (the build's own copy), else
 * the ones make install put in PKGDATADIR/traces (an installed coop whose
 * source tree was removed), else ../share/coop/traces from the binary's
 * folder (`make install prefix=DIR` on a build configured for another
 * prefix: DIR/bin/coop and DIR/share/coop/traces, PKGDATADIR naming the
 * configured prefix), else traces/ beside the binary. */
static bool find_default_traces(glob_t *g)
{
    if (glob_bundled(COOP_SRCDIR, g) || glob_bundled(COOP_PKGDATADIR, g))
        return true;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        char share[PATH_MAX]; /* as exe, so the patterns of both fit */
        int n = snprintf(share, sizeof share, "%s/../share/coop", exe);
        if ((n > 0 && (size_t)n < sizeof share && glob_bundled(share, g)) || glob_bundled(exe, g))
            return true;
    }
    fprintf(stderr,
            "coop replay: no bundled traces found (looked for "
            "%s/traces/*.trace.gz and *.cuda.pickle.gz,\n"
            "then in %s/traces, and in ../share/coop/traces and traces/ beside the coop "
            "binary); name trace files as arguments\n",
            COOP_SRCDIR, COOP_PKGDATADIR);
    return false;
}

typedef struct replay_cli {
    replay_choice choices[MAX_CHOICES];
    size_t num_choices;
    bool asked_recorded; /* --policy names recorded (not the default list) */
    bool json;
    const char *timeline_path; /* --timeline as given, or NULL */
    int device;                /* --device, or -1: the first with events */
    replay_measure_options opt;
} replay_cli;

/* Everything the run accumulates. Each trace is freed once measured (the
 * whole of every trace kept until the table made the peak the sum of all of
 * them); only its name stays, which its rows borrow. */
typedef struct replay_results {
    replay_row *rows;
    size_t num_rows;
    char **names; /* the measured traces' names (trace.name, taken over) */
    size_t num_names;
    size_t failed;    /* policies that failed (and were skipped) */
    char error[1024]; /* why the last file stopped the run (said after the table) */
} replay_results;

/* Keeps the message that ends the run: it is printed after the rows of the
 * files measured before, so that a table is not lost for a later file's
 * error. Returns rc. */
static int stop(replay_results *res, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int stop(replay_results *res, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    coop_vformat_message(res->error, sizeof res->error, fmt, ap); /* may quote a long path */
    va_end(ap);
    return rc;
}

/* The torch emulations reproduce PyTorch's allocator under the settings they
 * name (torch: the defaults; torch-expandable: expandable_segments:True and
 * otherwise the defaults). A snapshot recorded under settings that no chosen
 * emulation has would compare them with recorded (and with coop) under
 * different rules without a word: says so in one line. Where one chosen
 * emulation matches, the other is a what-if (what would expandable segments
 * have reserved?) and needs no warning. */
static void warn_torch_settings(const replay_cli *cli, const char *path, const trace *t)
{
    if (t->recorded_by_coop) { /* its recorded row is coop's: say so where it is shown */
        for (size_t i = 0; i < cli->num_choices; i++)
            if (!cli->choices[i].ops) {
                fprintf(stderr,
                        "coop replay: %s: recorded by coop (allocator_settings' "
                        "allocator): its recorded row is coop's reservation, not "
                        "PyTorch's\n",
                        path);
                break;
            }
        return;
    }
    bool any = false, matched = false;
    for (size_t i = 0; i < cli->num_choices; i++) {
        const replay_policy_ops *ops = cli->choices[i].ops;
        if (ops != &replay_policy_torch && ops != &replay_policy_torch_expandable)
            continue;
        unsigned emulated = ops == &replay_policy_torch ? 0 : TRACE_TORCH_EXPANDABLE_SEGMENTS;
        any = true;
        matched |= t->torch_settings == emulated;
    }
    if (!any || matched || !t->has_torch_settings)
        return;
    if (!t->torch_settings) {
        fprintf(stderr,
                "coop replay: %s: recorded with PyTorch's default allocator settings, "
                "which torch emulates (not among the policies)\n",
                path);
        return;
    }
    fprintf(stderr, "coop replay: %s: allocator_settings not PyTorch's defaults (", path);
    const char *sep = "";
    for (unsigned bit = 1; bit; bit <<= 1) {
        const char *name = (t->torch_settings & bit) ? trace_torch_setting_name(bit) : NULL;
        if (name) {
            fprintf(stderr, "%s%s", sep, name);
            sep = ", ";
        }
    }
    fprintf(stderr,
            "): torch emulates the defaults, torch-expandable expandable_segments:True "
            "alone%s\n",
            t->torch_settings == TRACE_TORCH_EXPANDABLE_SEGMENTS ? " (not among the policies)"
                                                                 : "");
}

/* A trace with no allocation or free after its live-at-start blocks measures
 * only where those blocks go: most likely a snapshot dumped without a
 * recorded history (its segments' blocks alone), which gave a table of
 * 1-event rows without a word. Says so, and how to record one. */
static void warn_no_history(const char *path, const trace *t)
{
    for (size_t i = t->num_live_at_start; i < t->num_events; i++) {
        trace_event_kind k = t->events[i].kind;
        if (k == TRACE_ALLOC || k == TRACE_FREE_REQUESTED || k == TRACE_FREE)
            return;
    }
    fprintf(stderr,
            "coop replay: %s: no allocation or free recorded after the %zu block%s live at the "
            "start: only their placement is measured (a PyTorch snapshot holds a history only "
            "if torch.cuda.memory._record_memory_history() ran before the model was built)\n",
            path, t->num_live_at_start, t->num_live_at_start == 1 ? "" : "s");
}

/* Replays one file; rows are printed now (JSON) or kept for the table.
 * snapshot: device_fits_traces found path a PyTorch snapshot (read as one,
 * not detected again). */
static int replay_file(const replay_cli *cli, const char *path, bool snapshot, replay_results *res)
{
    trace t;
    coop_status read = snapshot ? cli_read_trace_as(path, cli->device, TRACE_FORMAT_PICKLE, &t)
                                : cli_read_trace(path, cli->device, &t, NULL);
    if (read != COOP_OK) /* no host memory is the work failing (1), not bad input */
        return stop(res, read == COOP_ERR_HOST_NOMEM ? 1 : 2, "coop replay: %s", coop_last_error());
    char **grown_names = realloc(res->names, (res->num_names + 1) * sizeof *grown_names);
    if (grown_names)
        res->names = grown_names;
    replay_row *grown =
        grown_names ? realloc(res->rows, (res->num_rows + cli->num_choices) * sizeof *grown) : NULL;
    if (!grown) {
        trace_free(&t);
        return stop(res, 1, "coop replay: %s: out of host memory", path);
    }
    res->rows = grown;
    warn_torch_settings(cli, path, &t);
    /* the rows describe one device's history: a device picked by default
     * is said where others have events */
    if (cli->device < 0)
        cli_note_device_read("coop replay", path, t.snapshot_device, t.snapshot_devices_with_events,
                             "--device N replays another");
    warn_no_history(path, &t);
    size_t filled = 0;
    coop_status st = replay_measure(&t, cli->choices, cli->num_choices, &cli->opt,
                                    &grown[res->num_rows], &filled, &res->failed);
    int rc = 0;
    if (st != COOP_OK && cli->opt.timeline && ferror(cli->opt.timeline))
        rc = stop(res, 1, "coop replay: --timeline %s: %s", cli->timeline_path, coop_last_error());
    else if (st != COOP_OK)
        rc = stop(res, st == COOP_ERR_INVALID ? 2 : 1, "coop replay: %s: %s", path,
                  coop_last_error());
    bool has_segments = t.num_final_segments || t.has_segment_events;
    res->names[res->num_names++] = t.name; /* the rows point to it */
    t.name = NULL;
    trace_free(&t);
    if (rc)
        return rc;
    /* recorded has a row only for snapshots: asked for by name, its absence
     * is said (an empty table without a word looked like a failure) */
    if (cli->asked_recorded && !has_segments)
        fprintf(stderr,
                "coop replay: %s: no recorded row: the trace holds no recorded segments (only "
                "PyTorch snapshots, or text traces with S/E lines, do)\n",
                path);
    for (size_t i = 0; i < filled; i++)
        grown[res->num_rows + i].path = path;
    res->num_rows += filled;
    if (cli->json)
        for (size_t i = res->num_rows - filled; i < res->num_rows; i++)
            if (!replay_report_json(stdout, &res->rows[i]) && !ferror(stdout))
                return stop(res, 1, "coop replay: %s: out of host memory for a JSON row", path);
    /* a row that cannot be written stops the run (a full disk, a closed
     * pipe with SIGPIPE ignored): the rest would be lost too. Said at exit,
     * with the reason (cli_stdout_finish). */
    if (cli->json && !cli_stdout_ok())
        return stop(res, 1, "%s", "");
    return 0;
}

/* Whether the --timeline file is one of the traces: opening it for writing
 * would empty the trace before it is read. */
static bool timeline_is_a_trace(const char *timeline_path, char **paths, size_t num_paths)
{
    const char *named = cli_input_named_by(timeline_path, paths, num_paths);
    if (named)
        fprintf(stderr,
                "coop replay: --timeline %s is the trace %s: it would be overwritten before it is "
                "read\n",
                timeline_path, named);
    return named != NULL;
}

/* Whether the chosen policies that reserve 4 times the capacity of address
 * space up front (coop, jemalloc) can: else says so, naming them and the
 * limit (MAX_RESERVING_CAPACITY). */
static bool capacity_fits_reservations(const replay_cli *cli, const char *capacity_text)
{
    if (cli->opt.capacity <= MAX_RESERVING_CAPACITY)
        return true;
    const char *named[MAX_CHOICES];
    size_t n = 0;
    for (size_t i = 0; i < cli->num_choices; i++)
        if (cli->choices[i].ops == &replay_policy_coop ||
            cli->choices[i].ops == &replay_policy_jemalloc)
            named[n++] = cli->choices[i].name;
    if (!n)
        return true;
    fprintf(stderr,
            "coop replay: --capacity '%s' is too large for %s%s%s: %s 4 times the capacity of "
            "address space and a process has 2^47 bytes: at most 2^44 bytes (16 TiB) with %s "
            "(the other policies take up to 2^54 - 1)\n",
            capacity_text, named[0], n > 1 ? " and " : "", n > 1 ? named[1] : "",
            n > 1 ? "they reserve" : "it reserves", n > 1 ? "them" : "it");
    return false;
}

/* --device N reads device N of each PyTorch snapshot, and the other formats
 * hold one device: whether every trace is a snapshot, checked before the
 * first row (a snapshot then a text trace printed the snapshot's rows, then
 * stopped). Without TRACE, the bundled traces hold allocation traces
 * (*.trace.gz): refused as such rather than by the first one's name, a file
 * the user never gave; reading device N of the bundled snapshots alone would
 * drop the others without a word. A file whose format is unknown is left to
 * its read, which names what is wrong with it. snapshot[i] (n entries, all
 * false on entry) is set where paths[i] was found a snapshot, so that
 * replay_file does not detect its format again; its pipe's copy is kept
 * until then. */
static bool device_fits_traces(const replay_cli *cli, bool bundled, char **paths, size_t n,
                               bool *snapshot)
{
    if (cli->device < 0)
        return true;
    if (bundled) {
        fprintf(stderr,
                "coop replay: --device %d applies to PyTorch snapshots only, and without TRACE the "
                "bundled traces are replayed, allocation traces among them: name snapshots (such "
                "as traces/*.cuda.pickle.gz)\n",
                cli->device);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        trace_format format;
        if (trace_detect_format(paths[i], &format) != COOP_OK) {
            coop_clear_error();
            continue;
        }
        if (format != TRACE_FORMAT_PICKLE) {
            fprintf(stderr,
                    "coop replay: --device %d applies to PyTorch snapshots only, and %s is a %s "
                    "trace, not a snapshot\n",
                    cli->device, paths[i], trace_format_name(format));
            return false;
        }
        snapshot[i] = true;
    }
    return true;
}

/* Parses the options into *cli; returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, replay_cli *cli, const char **timeline_path)
{
    static const struct option long_options[] = {
        {"policy", required_argument, NULL, 'p'},   {"json", no_argument, NULL, 'j'},
        {"timeline", required_argument, NULL, 't'}, {"capacity", required_argument, NULL, 'c'},
        {"page", required_argument, NULL, 'g'},     {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    const char *policy_list = NULL;
    const char *page_text = NULL;
    const char *capacity_text = "80G"; /* DEFAULT_CAPACITY, as a user would write it */
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
        switch (c) {
        case 'p':
            policy_list = optarg;
            break;
        case 'j':
            cli->json = true;
            break;
        case 't':
            /* '-' is standard input as a TRACE and standard output in
             * convert; here standard output carries the rows, so a
             * timeline there would be mixed into them */
            if (!strcmp(optarg, "-")) {
                fprintf(stderr, "coop replay: --timeline -: standard output carries the rows; "
                                "give the timeline a file name (./- for a file named '-')\n");
                return 2;
            }
            *timeline_path = optarg;
            break;
        case 'c': {
            /* 2^64 bytes or more (99999999999999999999G) is too large, as
             * COOP_ALLOC_CONF says, not a misspelt byte count */
            byte_size_result r = byte_size_scan(optarg, strlen(optarg), &cli->opt.capacity);
            if (r == BYTE_SIZE_MALFORMED) {
                /* say what one is: 0 and 1.5G read as byte counts to a user */
                fprintf(stderr,
                        "coop replay: --capacity '%s' is not a byte count above 0 such as 40G or "
                        "512MiB (decimal or 0x hex; units K, M, G, T, binary, any case)\n",
                        optarg);
                return 2;
            }
            if (r == BYTE_SIZE_TOO_LARGE || cli->opt.capacity >= MAX_BYTES_OPTION) {
                fprintf(stderr,
                        "coop replay: --capacity '%s' is too large: it must be below 2^54 bytes "
                        "(16 PiB)\n",
                        optarg);
                return 2;
            }
            capacity_text = optarg;
            break;
        }
        case 'g': {
            /* the host backend's pages: a power of two from 512 bytes */
            byte_size_result r = byte_size_scan(optarg, strlen(optarg), &cli->opt.page);
            if (r == BYTE_SIZE_MALFORMED ||
                (r == BYTE_SIZE_OK &&
                 ((cli->opt.page & (cli->opt.page - 1)) || cli->opt.page < 512))) {
                fprintf(stderr,
                        "coop replay: --page '%s' is not a power of two from 512 bytes to "
                        "2^44\n",
                        optarg);
                return 2;
            }
            if (r == BYTE_SIZE_TOO_LARGE || cli->opt.page > MAX_PAGE_OPTION) {
                fprintf(stderr,
                        "coop replay: --page '%s' is too large: it must be at most 2^44 bytes "
                        "(16 TiB), as coop reserves 5 pages of address space and a process has "
                        "2^47 bytes\n",
                        optarg);
                return 2;
            }
            page_text = optarg;
            break;
        }
        case 'd':
            if (!cli_parse_device("coop replay", optarg, &cli->device))
                return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            cli_getopt_error("coop replay", c, argv, long_options);
            return 2;
        default:
            cli_getopt_error("coop replay", c, argv, long_options);
            usage(stderr);
            return 2;
        }
    }
    if (policy_list) {
        int rc = parse_policies(policy_list, cli->choices, &cli->num_choices);
        if (rc)
            return rc;
        for (size_t i = 0; i < cli->num_choices; i++)
            cli->asked_recorded |= !cli->choices[i].ops;
    } else {
        default_policies(cli->choices, &cli->num_choices);
    }
    /* only coop's pools have pages: a --page no chosen policy uses was
     * dropped without a word */
    bool uses_page = false;
    for (size_t i = 0; i < cli->num_choices; i++)
        uses_page |= cli->choices[i].ops == &replay_policy_coop ||
                     cli->choices[i].ops == &replay_policy_coop_segments;
    if (page_text && !uses_page) {
        fprintf(stderr,
                "coop replay: --page '%s' applies to coop and coop-segments only, and --policy "
                "lists neither\n",
                page_text);
        return 2;
    }
    return capacity_fits_reservations(cli, capacity_text) ? -1 : 2;
}

int cmd_replay(int argc, char **argv)
{
    replay_cli cli = {.device = -1, .opt = {.capacity = DEFAULT_CAPACITY, .page = DEFAULT_PAGE}};
    const char *timeline_path = NULL;
    int rc = parse_options(argc, argv, &cli, &timeline_path);
    if (rc >= 0)
        return rc;
    rc = 0;

    glob_t bundled = {0};
    bool use_bundled = optind >= argc;
    if (use_bundled && !find_default_traces(&bundled))
        return 2;
    char **paths = use_bundled ? bundled.gl_pathv : argv + optind;
    size_t num_paths = use_bundled ? bundled.gl_pathc : (size_t)(argc - optind);

    /* every trace openable before the first row (the bundled ones were
     * just found): a typo in the last path should not wait for the
     * replays of the traces before it */
    if (!use_bundled && !cli_inputs_name_stdin("coop replay", paths, num_paths))
        return 2;
    if (!use_bundled && !cli_inputs_readable("coop replay", paths, num_paths))
        return 2;
    /* the traces --device found snapshots: each format detected once */
    bool *snapshot = calloc(num_paths ? num_paths : 1, sizeof *snapshot);
    if (!snapshot || !device_fits_traces(&cli, use_bundled, paths, num_paths, snapshot) ||
        (timeline_path && timeline_is_a_trace(timeline_path, paths, num_paths))) {
        rc = snapshot ? 2 : 1; /* no host memory is the work failing (1) */
        if (!snapshot)
            fprintf(stderr, "coop replay: out of host memory\n");
        free(snapshot);
        if (use_bundled)
            globfree(&bundled);
        return rc;
    }
    FILE *timeline = NULL;
    /* The timeline goes to a temporary file beside it, renamed over it once
     * every trace is measured: a run stopped by a bad trace or a failed
     * write leaves the file that was there (cli_output.h). */
    cli_output tl_out = {.fd = -1};
    if (timeline_path) {
        errno = 0; /* ENOMEM after a failure: no host memory */
        const char *why = cli_output_open(&tl_out, timeline_path);
        if (!why) {
            errno = 0;
            timeline = tl_out.tmp ? fdopen(tl_out.fd, "w") : fopen(timeline_path, "w");
            if (!timeline && !errno)
                errno = ENOMEM;
            if (!timeline)
                why = errno == ENOMEM ? "out of host memory" : strerror(errno);
        }
        if (why) {
            /* no host memory is the work failing (1), not a bad --timeline */
            int rc_open = errno == ENOMEM ? 1 : 2;
            fprintf(stderr, "coop replay: cannot write --timeline %s: %s\n", timeline_path, why);
            if (tl_out.tmp)
                close(tl_out.fd);
            cli_output_discard(&tl_out);
            free(snapshot);
            if (use_bundled)
                globfree(&bundled);
            return rc_open;
        }
        replay_timeline_header(timeline);
    }
    cli.timeline_path = timeline_path;
    cli.opt.timeline = timeline;
    cli.opt.progress = isatty(STDERR_FILENO);

    replay_results res = {0};
    /* A bad trace (status 2) is named now and the others are replayed, as
     * coop sim does with its logs: the batch's rule (README, "The coop
     * command"). It stopped the run before, losing the rows of the traces
     * after it. The work failing (1: host memory, a row or the timeline
     * not written) still stops there: the rest would fail too. */
    bool bad_input = false;
    for (size_t i = 0; i < num_paths && rc == 0; i++) {
        rc = replay_file(&cli, paths[i], snapshot[i], &res);
        if (rc == 2) {
            fflush(stdout); /* JSON rows before it first where stdout and stderr meet */
            fprintf(stderr, "%s\n", res.error);
            res.error[0] = '\0';
            bad_input = true;
            rc = 0;
        }
    }
    free(snapshot);
    bool all_measured = rc == 0 && !bad_input;
    /* Every policy asked for had no row on every trace (recorded alone on
     * traces without recorded segments, each said above): the input cannot
     * answer the question, status 2 and no table. A header alone, exit 0,
     * read as a run that measured nothing. */
    bool no_row = all_measured && !res.num_rows && !res.failed && num_paths > 0;
    /* An error of the work stops at its file; the files measured before it
     * keep their rows (JSON printed them already), then the error is said. */
    if (!cli.json && (res.num_rows || (all_measured && !no_row)))
        replay_report_table(stdout, res.rows, res.num_rows);
    if (rc && res.error[0]) {
        fflush(stdout); /* rows first where stdout and stderr meet */
        fprintf(stderr, "%s\n", res.error);
    }
    if (no_row)
        fprintf(stderr, "coop replay: no row: no policy asked for has one for %s (above)\n",
                num_paths > 1 ? "any of the traces" : "the trace");
    if (rc == 0 && (bad_input || no_row))
        rc = 2;
    else if (rc == 0 && res.failed)
        rc = 1;
    for (size_t i = 0; i < res.num_names; i++)
        free(res.names[i]);
    free(res.names);
    free(res.rows);
    if (timeline) {
        /* kept when every trace was measured (a skipped policy, status 1,
         * has no series, as it has no row); else the old file stays. No row
         * at all (status 2) writes none either: a header alone read as a
         * run that measured nothing (rev37-J). */
        bool complete = all_measured && !no_row;
        bool written = !ferror(timeline); /* a failed write stopped the run: said */
        int err = 0;
        errno = 0;
        if (fclose(timeline) != 0 && written) {
            written = false;
            err = errno;
        }
        const char *why = NULL;
        bool direct = !tl_out.tmp; /* a device or FIFO: written as it went */
        if (written && complete && tl_out.tmp)
            why = cli_output_commit(&tl_out);
        else
            cli_output_discard(&tl_out);
        if (!why && !written && complete)
            why = err ? strerror(err) : "write error";
        /* a device or FIFO got the series of the traces replayed as they
         * went: there is no file to hold back */
        if (bad_input && written)
            fprintf(stderr, "coop replay: --timeline %s %s: a trace was refused (above)\n",
                    timeline_path, direct ? "holds the traces replayed only" : "not written");
        else if (no_row && written)
            fprintf(stderr, "coop replay: --timeline %s %s: no policy asked for has a row\n",
                    timeline_path, direct ? "holds no series" : "not written");
        if (why) {
            fprintf(stderr, "coop replay: writing --timeline %s failed: %s\n", timeline_path, why);
            rc = rc ? rc : 1;
        }
    }
    if (use_bundled)
        globfree(&bundled);
    return rc;
}
