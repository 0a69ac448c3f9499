/* coop replay's command line: arguments, exit codes, JSON and timeline output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "utf8_valid.h"
#include "cli/commands.h"
#include "replay/policy.h"

#define MiB (1ull << 20)

static char dir[] = "/tmp/coop-replay-cli-XXXXXX";

static char *path_in_dir(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Runs cmd_replay with stdout sent to a file and stderr to err.txt (then
 * echoed, so a failing test still shows the messages); returns the exit
 * status. */
static int run_replay(const char *out_path, int argc, char **argv)
{
    fflush(stdout);
    fflush(stderr);
    int saved = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    FILE *out = fopen(out_path, "w");
    char err_path[256]; /* not path_in_dir: argv may hold its buffers */
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    FILE *err = fopen(err_path, "w+");
    assert_non_null(out);
    assert_non_null(err);
    dup2(fileno(out), STDOUT_FILENO);
    dup2(fileno(err), STDERR_FILENO);
    int rc = cmd_replay(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved);
    close(saved_err);
    fclose(out);
    rewind(err);
    char buf[1024];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, err)) > 0)
        fwrite(buf, 1, n, stderr);
    fclose(err);
    return rc;
}

/* The whole of a file of the test directory (err.txt, out.txt), NUL-ended. */
static char *slurp(const char *name)
{
    static char text[1 << 16];
    char path[256]; /* not path_in_dir: the caller may hold its buffers */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* cmd_replay with the given arguments (NULL-terminated), stdout to out.txt,
 * stderr to err.txt. */
static int run_args(const char *first, ...)
{
    char *argv[32] = {"replay"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return run_replay(path_in_dir("out.txt"), argc, argv);
}

#define RUN(...) run_args(__VA_ARGS__, (const char *)NULL)

static const char small_trace[] = "coop-trace 1\n"
                                  "# one medium tensor, then a small one after it is gone\n"
                                  "A 1 1572864 0\n"
                                  "F 1\n"
                                  "A 2 1000 0\n"
                                  "F 2\n";

/* pickle.dumps({"device_traces": [[{"action": "alloc", "addr": 4096,
 * "size": 512, "stream": 0}]], "segments": [], "allocator_settings":
 * {"expandable_segments": True, "max_split_size": -1,
 * "garbage_collection_threshold": 0.0}}, protocol=2): a snapshot recorded
 * with expandable segments, which torch does not emulate */
static const char expandable_pickle[] =
    "\x80\x02\x7d\x71\x00\x28\x58\x0d\x00\x00\x00\x64\x65\x76\x69\x63"
    "\x65\x5f\x74\x72\x61\x63\x65\x73\x71\x01\x5d\x71\x02\x5d\x71\x03"
    "\x7d\x71\x04\x28\x58\x06\x00\x00\x00\x61\x63\x74\x69\x6f\x6e\x71"
    "\x05\x58\x05\x00\x00\x00\x61\x6c\x6c\x6f\x63\x71\x06\x58\x04\x00"
    "\x00\x00\x61\x64\x64\x72\x71\x07\x4d\x00\x10\x58\x04\x00\x00\x00"
    "\x73\x69\x7a\x65\x71\x08\x4d\x00\x02\x58\x06\x00\x00\x00\x73\x74"
    "\x72\x65\x61\x6d\x71\x09\x4b\x00\x75\x61\x61\x58\x08\x00\x00\x00"
    "\x73\x65\x67\x6d\x65\x6e\x74\x73\x71\x0a\x5d\x71\x0b\x58\x12\x00"
    "\x00\x00\x61\x6c\x6c\x6f\x63\x61\x74\x6f\x72\x5f\x73\x65\x74\x74"
    "\x69\x6e\x67\x73\x71\x0c\x7d\x71\x0d\x28\x58\x13\x00\x00\x00\x65"
    "\x78\x70\x61\x6e\x64\x61\x62\x6c\x65\x5f\x73\x65\x67\x6d\x65\x6e"
    "\x74\x73\x71\x0e\x88\x58\x0e\x00\x00\x00\x6d\x61\x78\x5f\x73\x70"
    "\x6c\x69\x74\x5f\x73\x69\x7a\x65\x71\x0f\x4a\xff\xff\xff\xff\x58"
    "\x1c\x00\x00\x00\x67\x61\x72\x62\x61\x67\x65\x5f\x63\x6f\x6c\x6c"
    "\x65\x63\x74\x69\x6f\x6e\x5f\x74\x68\x72\x65\x73\x68\x6f\x6c\x64"
    "\x71\x10\x47\x00\x00\x00\x00\x00\x00\x00\x00\x75\x75\x2e";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    write_file(path_in_dir("small.trace"), small_trace);
    write_file(path_in_dir("bad.trace"), "coop-trace 1\nA 1 banana 0\n");
    write_file(path_in_dir("empty.trace"), "coop-trace 1\n");
    FILE *f = fopen(path_in_dir("expandable.pickle"), "wb");
    if (!f ||
        fwrite(expandable_pickle, 1, sizeof expandable_pickle - 1, f) !=
            sizeof expandable_pickle - 1 ||
        fclose(f) != 0)
        return -1;
    /* the same snapshot with PyTorch's defaults: expandable_segments False
     * (NEWFALSE for the NEWTRUE after its key's memo, q\x0e) */
    char defaults[sizeof expandable_pickle];
    memcpy(defaults, expandable_pickle, sizeof defaults);
    char *flag = NULL;
    for (size_t i = 0; i + 3 < sizeof defaults && !flag; i++)
        if (!memcmp(defaults + i, "\x71\x0e\x88", 3))
            flag = defaults + i + 2;
    f = flag ? fopen(path_in_dir("default.pickle"), "wb") : NULL;
    if (!f)
        return -1;
    *flag = '\x89';
    if (fwrite(defaults, 1, sizeof defaults - 1, f) != sizeof defaults - 1 || fclose(f) != 0)
        return -1;
    /* the second tensor does not fit beside the first in 2500 bytes */
    write_file(path_in_dir("two.trace"), "coop-trace 1\nA 1 1000 0\nA 2 2000 0\nF 1\nF 2\n");
    /* what PyTorch reserved: one 2 MiB segment, held at the end */
    write_file(path_in_dir("segment.trace"), "coop-trace 1\nS 0x200000 2097152 0\nA 1 1000 0\n"
                                             "F 1\nE 0x200000 2097152 0\n");
    /* segment events, none held at the end (no E line): recorded has a row */
    write_file(path_in_dir("freed-segment.trace"), "coop-trace 1\nS 0x200000 2097152 0\n"
                                                   "A 1 1000 0\nF 1\nU 0x200000 2097152 0\n");
    /* recorded by coop.torch (P coop): its recorded row is coop's */
    write_file(path_in_dir("by-coop.trace"), "coop-trace 1\nP coop\nS 0x200000 2097152 0\n"
                                             "A 1 1000 0\nF 1\nE 0x200000 2097152 0\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {
        "small.trace",        "bad.trace",           "empty.trace",  "two.trace", "segment.trace",
        "expandable.pickle",  "default.pickle",      "out.txt",      "err.txt",   "timeline.txt",
        "fresh-timeline.txt", "freed-segment.trace", "by-coop.trace"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(path_in_dir(names[i]));
    rmdir(dir);
    return 0;
}

/* --help: the usage on stdout, and nothing on stderr */
static void help_exits_zero(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--help"), 0);
    if (strncmp(slurp("out.txt"), "usage: coop replay", 18))
        fail_msg("no usage on stdout: '%s'", slurp("out.txt"));
    assert_string_equal(slurp("err.txt"), "");
}

static void bad_arguments_exit_two(void **unused)
{
    (void)unused;
    char *trace = path_in_dir("small.trace");
    assert_int_equal(RUN("--bogus", trace), 2);
    assert_int_equal(RUN("--policy", "nonsense", trace), 2);
    assert_int_equal(RUN("--policy", ",", trace), 2);
    assert_int_equal(RUN("--capacity", "lots", trace), 2);
    assert_int_equal(RUN("--capacity", "0", trace), 2);
    assert_int_equal(RUN("--capacity", "-5", trace), 2);
    assert_int_equal(RUN("--page", "3000", trace), 2);
    assert_int_equal(RUN("--capacity"), 2); /* missing value */
}

static void unreadable_traces_exit_two(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--policy", "ideal", path_in_dir("does-not-exist.trace")), 2);
    assert_int_equal(RUN("--policy", "ideal", path_in_dir("bad.trace")), 2);
}

/* A batch's rule, as coop sim's: a bad trace is named and the others are
 * still replayed, exit 2 at the end. Before, replay stopped at the first bad
 * trace (good, bad, good printed the first's rows only) while sim went on. */
static void bad_trace_among_good_ones_is_named_and_the_rest_replayed(void **unused)
{
    (void)unused;
    char good[256], bad[256]; /* path_in_dir reuses its buffers (RUN too) */
    snprintf(good, sizeof good, "%s", path_in_dir("small.trace"));
    snprintf(bad, sizeof bad, "%s", path_in_dir("bad.trace"));
    assert_int_equal(RUN("--policy", "ideal", good, bad, good), 2);
    const char *out = slurp("out.txt");
    const char *first = strstr(out, "small.trace");
    if (!strstr(out, "min_cap") || !first || !strstr(first + 1, "small.trace"))
        fail_msg("no table with both good traces: '%s'", out);
    if (!strstr(slurp("err.txt"), "bad.trace:2:"))
        fail_msg("the error is not said: '%s'", slurp("err.txt"));
    assert_int_equal(RUN("--json", "--policy", "ideal", good, bad, good), 2);
    out = slurp("out.txt");
    first = strstr(out, "\"policy\":\"ideal\"");
    if (!first || !strstr(first + 1, "\"policy\":\"ideal\""))
        fail_msg("not two JSON rows: '%s'", out);
    if (!strstr(slurp("err.txt"), "bad.trace:2:"))
        fail_msg("the error is not said: '%s'", slurp("err.txt"));
    /* an error in the first file: the later one still runs */
    assert_int_equal(RUN("--policy", "ideal", bad, good), 2);
    if (!strstr(slurp("out.txt"), "small.trace"))
        fail_msg("no table for small.trace: '%s'", slurp("out.txt"));
}

/* A bad trace among good ones leaves the --timeline file that was there
 * (it would hold some traces' series only), and says so; a device written
 * directly (no temporary file to drop) got the good traces' series, which
 * the note said were "not written". Only a bad trace: no table header. */
static void bad_trace_leaves_the_timeline(void **unused)
{
    (void)unused;
    char good[256], bad[256], timeline[256];
    snprintf(good, sizeof good, "%s", path_in_dir("small.trace"));
    snprintf(bad, sizeof bad, "%s", path_in_dir("bad.trace"));
    snprintf(timeline, sizeof timeline, "%s", path_in_dir("timeline.txt"));
    write_file(timeline, "old\n");
    assert_int_equal(RUN("--timeline", timeline, "--policy", "ideal", good, bad, good), 2);
    assert_string_equal(slurp("timeline.txt"), "old\n");
    if (!strstr(slurp("err.txt"), "timeline.txt not written: a trace was refused"))
        fail_msg("the kept timeline is not said: '%s'", slurp("err.txt"));
    assert_int_equal(RUN("--timeline", "/dev/null", "--policy", "ideal", good, bad), 2);
    if (strstr(slurp("err.txt"), "not written") ||
        !strstr(slurp("err.txt"), "--timeline /dev/null holds the traces replayed only"))
        fail_msg("a device's timeline: '%s'", slurp("err.txt"));
    assert_int_equal(RUN("--policy", "ideal", bad), 2);
    assert_string_equal(slurp("out.txt"), "");
    /* refused, not measured: no "no row" line beside the error (rev37-J) */
    if (strstr(slurp("err.txt"), "no row"))
        fail_msg("a bad trace said to have no row: '%s'", slurp("err.txt"));
}

/* Every policy asked for skipped (coop's 4 x 16 GiB reservation refused
 * under RLIMIT_AS) is the work failing, status 1 with the skip said, not
 * the "no row" input error (status 2) of a policy that has none to give
 * (rev37-J). In a child, as the limit stays; not under ASan, whose shadow
 * memory is already past any such limit. */
static void skipped_policies_are_not_a_missing_row(void **unused)
{
    (void)unused;
#if defined(__SANITIZE_ADDRESS__)
    skip();
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    skip();
#endif
#endif
    char good[256];
    snprintf(good, sizeof good, "%s", path_in_dir("small.trace"));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        unsigned long long vm_kib = 0;
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "VmSize: %llu", &vm_kib) == 1)
                break;
        if (f)
            fclose(f);
        struct rlimit lim = {.rlim_cur = (rlim_t)(vm_kib * 1024 + (1ull << 30)),
                             .rlim_max = RLIM_INFINITY};
        if (!vm_kib || setrlimit(RLIMIT_AS, &lim) != 0)
            _exit(99);
        _exit(RUN("--policy", "coop", "--capacity", "16G", good));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    if (!strstr(slurp("err.txt"), "coop skipped") || strstr(slurp("err.txt"), "no row"))
        fail_msg("every policy skipped: '%s'", slurp("err.txt"));
}

/* No row for any trace (--policy recorded on a trace without recorded
 * segments: status 2, no table) writes no --timeline either, as a bad
 * trace does: an old file keeps its contents, a new one is not made, and
 * that is said (rev37-J: a header alone was written). */
static void no_row_leaves_the_timeline(void **unused)
{
    (void)unused;
    char good[256], timeline[256], fresh[256];
    snprintf(good, sizeof good, "%s", path_in_dir("small.trace"));
    snprintf(timeline, sizeof timeline, "%s", path_in_dir("timeline.txt"));
    snprintf(fresh, sizeof fresh, "%s", path_in_dir("fresh-timeline.txt"));
    write_file(timeline, "old\n");
    assert_int_equal(RUN("--timeline", timeline, "--policy", "recorded", good), 2);
    assert_string_equal(slurp("timeline.txt"), "old\n");
    if (!strstr(slurp("err.txt"), "no policy asked for has one for the trace (above)"))
        fail_msg("one trace's no-row line: '%s'", slurp("err.txt"));
    if (!strstr(slurp("err.txt"), "timeline.txt not written: no policy asked for has a row"))
        fail_msg("the kept timeline is not said: '%s'", slurp("err.txt"));
    assert_int_equal(RUN("--timeline", fresh, "--policy", "recorded", good, good), 2);
    if (!strstr(slurp("err.txt"), "no policy asked for has one for any of the traces (above)"))
        fail_msg("two traces' no-row line: '%s'", slurp("err.txt"));
    assert_int_equal(access(fresh, F_OK), -1);
    assert_int_equal(RUN("--timeline", "/dev/null", "--policy", "recorded", good), 2);
    if (!strstr(slurp("err.txt"),
                "--timeline /dev/null holds no series: no policy asked for has a row"))
        fail_msg("a device's timeline: '%s'", slurp("err.txt"));
}

/* The error said after the table ("coop replay: " and the reader's
 * message, kept in 1024 bytes) is cut between UTF-8 characters: a bad
 * trace under five folders of 127 e-acute (a path of about 1,300 bytes),
 * behind 0 and 1 'x'. */
static void long_path_error_is_cut_between_characters(void **unused)
{
    (void)unused;
    for (size_t k = 0; k < 2; k++) {
        char path[1600], folder[256] = "x";
        repeat_character(folder + k, "\xc3\xa9", 127);
        size_t n = (size_t)snprintf(path, sizeof path, "%s", dir);
        for (int d = 0; d < 5; d++) {
            n += (size_t)snprintf(path + n, sizeof path - n, "/%s", folder);
            assert_int_equal(mkdir(path, 0700), 0);
        }
        snprintf(path + n, sizeof path - n, "/bad.trace");
        write_file(path, "coop-trace 1\nA 1 banana 0\n");
        assert_int_equal(RUN("--policy", "ideal", path), 2);
        expect_valid_utf8("the error", slurp("err.txt"));
        unlink(path);
        for (int d = 0; d < 5; d++) {
            path[n] = '\0';
            rmdir(path);
            n -= strlen(folder) + 1;
        }
    }
}

/* Peak resident memory (KiB) of `coop replay --policy ideal` over `copies`
 * times the same file, run in a child so that the peak is its own. */
static long replay_peak_kib(const char *path, int copies)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[24] = {"replay", "--policy", "ideal"};
        int argc = 3;
        for (int i = 0; i < copies && argc < 23; i++)
            argv[argc++] = (char *)path;
        argv[argc] = NULL;
        FILE *null = freopen("/dev/null", "w", stdout);
        _exit(null ? cmd_replay(argc, argv) : 99);
    }
    int status;
    struct rusage ru;
    assert_int_equal(wait4(pid, &status, 0, &ru), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    return ru.ru_maxrss;
}

/* Each trace is freed once measured: replaying the same 200,000-event trace
 * eight times needs about the memory of one (the traces used to stay until
 * the table was printed, about 9.6 MB of events each). */
static void traces_are_freed_one_by_one(void **unused)
{
    (void)unused;
    enum { ALLOCS = 100000, EVENTS_BYTES = 2 * ALLOCS * 48 / 1024 /* KiB */ };
    /* AddressSanitizer holds freed memory in its quarantine (.ci/run) */
    if (getenv("COOP_SANITIZED"))
        skip();
    char *path = path_in_dir("big.trace");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("coop-trace 1\n", f);
    for (int i = 0; i < ALLOCS; i++)
        fprintf(f, "A %d %d 0\nF %d\n", i, 512 * (1 + i % 7), i);
    assert_int_equal(fclose(f), 0);
    long one = replay_peak_kib(path, 1), eight = replay_peak_kib(path, 8);
    unlink(path);
    printf("peak RSS: one trace %ld KiB, eight %ld KiB (events %d KiB a trace)\n", one, eight,
           (int)EVENTS_BYTES);
    /* kept, the seven more would add 7 x EVENTS_BYTES */
    assert_true(eight - one < 2 * EVENTS_BYTES);
}

/* Reads the JSON lines of the last run into an array of objects. */
static json_t *read_json_lines(void)
{
    FILE *f = fopen(path_in_dir("out.txt"), "r");
    assert_non_null(f);
    json_t *all = json_array();
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!o)
            fail_msg("output line is not JSON: %s (%s)", line, err.text);
        json_array_append_new(all, o);
    }
    fclose(f);
    return all;
}

static void json_rows_have_the_issue_keys(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--json", "--policy", "ideal,torch", path_in_dir("small.trace")), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 2);
    static const char *const keys[] = {"trace",
                                       "policy",
                                       "events",
                                       "peak_live_bytes",
                                       "peak_reserved_bytes",
                                       "reserved_over_live",
                                       "min_capacity_bytes",
                                       "map_bytes",
                                       "frag_mean",
                                       "frag_max",
                                       "ns_per_op",
                                       "gmlake_frag",
                                       "oom_event",
                                       "torch_settings_default",
                                       "recorded_by_coop",
                                       "path"};
    for (size_t r = 0; r < 2; r++) {
        json_t *o = json_array_get(rows, r);
        assert_int_equal(json_object_size(o), sizeof keys / sizeof keys[0]);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (!json_object_get(o, keys[k]))
                fail_msg("row %zu lacks key %s", r, keys[k]);
        assert_int_equal(json_integer_value(json_object_get(o, "peak_live_bytes")), 1572864);
        assert_int_equal(json_integer_value(json_object_get(o, "events")), 4);
        /* the path as given, beside the file's name */
        assert_string_equal(json_string_value(json_object_get(o, "trace")), "small.trace");
        assert_non_null(strstr(json_string_value(json_object_get(o, "path")), "/small.trace"));
        assert_true(json_is_null(json_object_get(o, "oom_event"))); /* both completed */
    }
    json_t *ideal = json_array_get(rows, 0), *torch = json_array_get(rows, 1);
    assert_string_equal(json_string_value(json_object_get(ideal, "policy")), "ideal");
    assert_int_equal(json_integer_value(json_object_get(ideal, "min_capacity_bytes")), 1572864);
    /* torch: a 20 MiB segment for the 1.5 MiB tensor stays cached beside the
     * small one's 2 MiB; at the minimum capacity it is released for the small
     * segment instead: 22 MiB mapped either way */
    assert_int_equal(json_integer_value(json_object_get(torch, "peak_reserved_bytes")), 22 * MiB);
    json_int_t min = json_integer_value(json_object_get(torch, "min_capacity_bytes"));
    assert_true(min >= (json_int_t)(20 * MiB) && min <= (json_int_t)(20 * MiB + 20 * MiB / 1000));
    assert_int_equal(json_integer_value(json_object_get(torch, "map_bytes")), 22 * MiB);
    json_decref(rows);
}

static void capacity_too_small_reports_oom(void **unused)
{
    (void)unused;
    assert_int_equal(
        RUN("--json", "--capacity", "10M", "--policy", "torch", path_in_dir("small.trace")), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 1);
    assert_true(json_is_null(json_object_get(json_array_get(rows, 0), "min_capacity_bytes")));
    json_decref(rows);
}

/* A run that ran out of memory says where, and the ratios of its truncated
 * peaks to the whole trace's are not reported as the trace's. */
static void oom_row_names_its_event(void **unused)
{
    (void)unused;
    assert_int_equal(
        RUN("--json", "--capacity", "2500", "--policy", "ideal", path_in_dir("two.trace")), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 1);
    json_t *row = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(row, "oom_event")), 1);
    assert_true(json_is_null(json_object_get(row, "min_capacity_bytes")));
    /* 1000 bytes reserved before the OOM against a whole-trace peak of 3000 */
    assert_int_equal(json_integer_value(json_object_get(row, "peak_reserved_bytes")), 1000);
    assert_int_equal(json_integer_value(json_object_get(row, "peak_live_bytes")), 3000);
    assert_true(json_is_null(json_object_get(row, "reserved_over_live")));
    assert_true(json_is_null(json_object_get(row, "gmlake_frag")));
    json_decref(rows);
}

/* A run out of memory on its very first allocation measured no event: its
 * fragmentation is null ("-" in the table), where it said 0.0 from its one
 * sample of the empty pool. One out of memory later keeps its figures. */
static void oom_on_the_first_allocation_has_no_fragmentation(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--json", "--capacity", "500", "--policy", "ideal,torch,coop",
                         path_in_dir("two.trace")),
                     0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *row = json_array_get(rows, i);
        assert_int_equal(json_integer_value(json_object_get(row, "oom_event")), 0);
        assert_true(json_is_null(json_object_get(row, "frag_mean")));
        assert_true(json_is_null(json_object_get(row, "frag_max")));
    }
    json_decref(rows);
    assert_int_equal(
        RUN("--capacity", "500", "--policy", "ideal,torch,coop", path_in_dir("two.trace")), 0);
    char *table = strdup(slurp("out.txt"));
    assert_non_null(table);
    int data_rows = 0;
    for (char *save = NULL, *line = strtok_r(table, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "two.trace", 9))
            continue;
        char *cell[13], *save_cell = NULL;
        int n = 0;
        for (char *c = strtok_r(line, " ", &save_cell); c && n < 13;
             c = strtok_r(NULL, " ", &save_cell))
            cell[n++] = c;
        assert_int_equal(n, 13);
        assert_string_equal(cell[6], "OOM@0");
        assert_string_equal(cell[9], "-");  /* frag_mean */
        assert_string_equal(cell[10], "-"); /* frag_max */
        data_rows++;
    }
    assert_int_equal(data_rows, 3);
    free(table);
    /* out of memory at event 1: event 0 was measured */
    assert_int_equal(
        RUN("--json", "--capacity", "2500", "--policy", "ideal", path_in_dir("two.trace")), 0);
    rows = read_json_lines();
    json_t *row = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(row, "oom_event")), 1);
    assert_true(json_is_real(json_object_get(row, "frag_mean")));
    assert_true(json_is_real(json_object_get(row, "frag_max")));
    json_decref(rows);
}

/* recorded's minimum capacity is its recorded peak, and like any other
 * policy's it is null when that does not fit in --capacity. */
static void recorded_above_capacity_has_no_minimum(void **unused)
{
    (void)unused;
    /* above the recorded peak, and exactly it: it fits */
    const char *fitting[] = {"4M", "2M"};
    for (size_t i = 0; i < sizeof fitting / sizeof fitting[0]; i++) {
        char *trace = path_in_dir("segment.trace");
        assert_int_equal(RUN("--json", "--capacity", fitting[i], "--policy", "recorded", trace), 0);
        json_t *rows = read_json_lines();
        assert_int_equal(json_array_size(rows), 1);
        json_t *row = json_array_get(rows, 0);
        assert_int_equal(json_integer_value(json_object_get(row, "min_capacity_bytes")), 2 * MiB);
        assert_int_equal(json_integer_value(json_object_get(row, "map_bytes")), 2 * MiB);
        json_decref(rows);
    }

    char *trace = path_in_dir("segment.trace");
    assert_int_equal(RUN("--json", "--capacity", "1M", "--policy", "recorded", trace), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 1);
    json_t *row = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(row, "peak_reserved_bytes")), 2 * MiB);
    assert_true(json_is_null(json_object_get(row, "min_capacity_bytes")));
    assert_true(json_is_null(json_object_get(row, "map_bytes")));
    assert_true(json_is_null(json_object_get(row, "oom_event")));
    json_decref(rows);
}

/* A trace without a call times nothing: ns_per_op is unknown, not 0 ns. */
static void empty_trace_has_no_timing(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--json", "--policy", "ideal", path_in_dir("empty.trace")), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 1);
    json_t *row = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(row, "events")), 0);
    assert_true(json_is_null(json_object_get(row, "ns_per_op")));
    json_decref(rows);
}

static void timeline_is_written(void **unused)
{
    (void)unused;
    char *timeline = path_in_dir("timeline.txt");
    assert_int_equal(
        RUN("--timeline", timeline, "--policy", "torch,ideal", path_in_dir("small.trace")), 0);
    FILE *f = fopen(timeline, "r");
    assert_non_null(f);
    char line[256];
    int policies = 0, blocks = 0;
    unsigned long long events = 0, last_s = 0, first_s = 0;
    bool any_s = false;
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "coop-replay-timeline 1\n");
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "policy ", 7)) {
            /* timeline.h: each series starts at the first event and ends at
             * the last (EVENTS - 1), written even unchanged */
            if (policies++)
                assert_int_equal(last_s, events - 1);
            any_s = false;
        }
        if (!strncmp(line, "trace ", 6))
            assert_int_equal(sscanf(line, "trace %*s %llu", &events), 1);
        if (line[0] == 's') {
            assert_int_equal(sscanf(line, "s %llu", &last_s), 1);
            if (!any_s)
                first_s = last_s;
            any_s = true;
            assert_int_equal(first_s, 0);
        }
        blocks += line[0] == 'b';
    }
    fclose(f);
    assert_int_equal(last_s, events - 1);
    assert_true(events > 1);
    assert_int_equal(policies, 2);
    assert_int_equal(blocks, 4); /* two blocks per policy */
}

/* A whole file, NUL-ended, in memory of its own (the caller frees it). */
static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (size_t got; (got = fread(text + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            text = realloc(text, cap);
            assert_non_null(text);
        }
    }
    fclose(f);
    text[n] = '\0';
    *len = n;
    return text;
}

/* The same replay, once more with an unrelated mapping held where the first
 * run's ranges were (so coop's reservation, the segment spaces and
 * jemalloc's range all land elsewhere, as under ASLR), writes the same
 * timeline to the byte: block records used to carry absolute host addresses. */
static void timeline_repeats_at_another_base(void **unused)
{
    (void)unused;
    char trace[4096] = "coop-trace 1\n";
    size_t len = strlen(trace);
    /* blocks of 700 B to 40 MiB, two streams, freed out of order */
    for (int i = 0; i < 24; i++)
        len += (size_t)snprintf(trace + len, sizeof trace - len, "A %d %llu %d\n", i,
                                700ull << (i % 16), i % 2);
    for (int i = 0; i < 24; i += 3)
        len += (size_t)snprintf(trace + len, sizeof trace - len, "F %d\n", (i * 7) % 24);
    for (int i = 24; i < 30; i++)
        len += (size_t)snprintf(trace + len, sizeof trace - len, "A %d %llu 0\n", i,
                                3000ull << (i % 12));
    write_file(path_in_dir("bases.trace"), trace);
    char first_path[256], second_path[256];
    snprintf(first_path, sizeof first_path, "%s", path_in_dir("first.txt"));
    snprintf(second_path, sizeof second_path, "%s", path_in_dir("second.txt"));
    const char *policies = "coop,coop-segments,torch,torch-expandable,jemalloc,ideal";
    assert_int_equal(RUN("--timeline", first_path, "--capacity", "4G", "--policy", policies,
                         path_in_dir("bases.trace")),
                     0);
    size_t hold_size = 64ull << 30;
    void *hold =
        mmap(NULL, hold_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    assert_true(hold != MAP_FAILED);
    assert_int_equal(RUN("--timeline", second_path, "--capacity", "4G", "--policy", policies,
                         path_in_dir("bases.trace")),
                     0);
    munmap(hold, hold_size);
    size_t first_len, second_len;
    char *first = read_whole(first_path, &first_len);
    char *second = read_whole(second_path, &second_len);
    int blocks = 0;
    for (const char *c = first; (c = strstr(c, "\nb ")); c++)
        blocks++;
    assert_true(blocks >= 6 * 30);
    if (first_len != second_len || memcmp(first, second, first_len)) {
        size_t at = 0;
        while (at < first_len && at < second_len && first[at] == second[at])
            at++;
        size_t line = at;
        while (line > 0 && first[line - 1] != '\n')
            line--;
        fail_msg("the timelines differ from byte %zu: '%.40s' vs '%.40s'", at, first + line,
                 second + line);
    }
    free(first);
    free(second);
}

/* After an OOM nothing is measured: the series stop before the OOM event
 * (they used to drop to 0 live and 0 reserved) and an oom record says where. */
static void timeline_stops_at_the_oom(void **unused)
{
    (void)unused;
    char *timeline = path_in_dir("timeline.txt");
    assert_int_equal(RUN("--timeline", timeline, "--capacity", "2500", "--policy", "ideal",
                         path_in_dir("two.trace")),
                     0);
    FILE *f = fopen(timeline, "r");
    assert_non_null(f);
    char line[256];
    int samples = 0, ooms = 0;
    unsigned long long event = 0, live = 0, reserved = 0, oom_event = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "s %llu %llu %llu", &event, &live, &reserved) == 3) {
            samples++;
            if (event >= 1)
                fail_msg("a sample at or after the OOM: %s", line);
        }
        ooms += sscanf(line, "oom %llu", &oom_event) == 1;
    }
    fclose(f);
    /* the one sample: after event 0, the first 1000 bytes live and held */
    assert_int_equal(samples, 1);
    assert_int_equal(live, 1000);
    assert_int_equal(reserved, 1000);
    assert_int_equal(ooms, 1);
    assert_int_equal(oom_event, 1);
}

/* A snapshot recorded under settings no chosen emulation has: one warning
 * line naming them, and the rows say so (null for a trace that cannot). */
static void non_default_torch_settings_are_flagged(void **unused)
{
    (void)unused;
    /* copies: path_in_dir's buffer is reused by every RUN (for out.txt) */
    char pickle[256], defaults[256];
    snprintf(pickle, sizeof pickle, "%s", path_in_dir("expandable.pickle"));
    snprintf(defaults, sizeof defaults, "%s", path_in_dir("default.pickle"));
    assert_int_equal(RUN("--json", "--policy", "torch,ideal", pickle), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_array_size(rows), 2);
    for (size_t i = 0; i < 2; i++)
        assert_true(
            json_is_false(json_object_get(json_array_get(rows, i), "torch_settings_default")));
    json_decref(rows);
    const char *err = slurp("err.txt");
    if (!strstr(err, "expandable_segments") || !strstr(err, "torch-expandable") ||
        !strstr(err, "alone (not among the policies)"))
        fail_msg("no warning about the settings: '%s'", err);
    const char *newline = strchr(err, '\n');
    if (!newline || newline[1] != '\0')
        fail_msg("the warning is not one line: '%s'", err);
    /* torch-expandable emulates them: no warning, with or without torch, in
     * either order */
    assert_int_equal(RUN("--json", "--policy", "torch,torch-expandable", pickle), 0);
    assert_string_equal(slurp("err.txt"), "");
    assert_int_equal(RUN("--json", "--policy", "torch-expandable,torch", pickle), 0);
    assert_string_equal(slurp("err.txt"), "");
    assert_int_equal(RUN("--json", "--policy", "torch-expandable", pickle), 0);
    assert_string_equal(slurp("err.txt"), "");
    /* default settings: torch emulates them, so with torch no warning; under
     * torch-expandable alone (a what-if) one line says torch would match */
    rows = NULL;
    assert_int_equal(RUN("--json", "--policy", "torch", defaults), 0);
    assert_string_equal(slurp("err.txt"), "");
    rows = read_json_lines();
    assert_true(json_is_true(json_object_get(json_array_get(rows, 0), "torch_settings_default")));
    json_decref(rows);
    assert_int_equal(RUN("--json", "--policy", "torch-expandable", defaults), 0);
    err = slurp("err.txt");
    if (!strstr(err, "default") || !strstr(err, "torch emulates"))
        fail_msg("no note that torch emulates the defaults: '%s'", err);
    /* without torch among the policies there is nothing to warn about */
    assert_int_equal(RUN("--json", "--policy", "ideal", pickle), 0);
    assert_string_equal(slurp("err.txt"), "");
    /* a text trace records no settings: nothing to warn about, whichever
     * emulation is chosen */
    assert_int_equal(RUN("--json", "--policy", "torch-expandable", path_in_dir("small.trace")), 0);
    assert_string_equal(slurp("err.txt"), "");
    /* settings of a text trace's P line, two of them named apart */
    write_file(path_in_dir("settings.trace"),
               "coop-trace 1\nP torch expandable_segments max_split_size\nA 1 512 0\nF 1\n");
    assert_int_equal(RUN("--json", "--policy", "torch", path_in_dir("settings.trace")), 0);
    if (!strstr(slurp("err.txt"), "not PyTorch's defaults (expandable_segments, max_split_size): "))
        fail_msg("the settings are not listed: '%s'", slurp("err.txt"));
    unlink(path_in_dir("settings.trace"));
    /* a text trace records no settings */
    assert_int_equal(RUN("--json", "--policy", "torch", path_in_dir("small.trace")), 0);
    rows = read_json_lines();
    assert_true(json_is_null(json_object_get(json_array_get(rows, 0), "torch_settings_default")));
    json_decref(rows);
}

/* Without --capacity and --page: an 80 GiB device (a 70 GiB tensor fits,
 * below 70 GiB it does not) and 2 MiB pages (coop maps one for 1000 bytes). */
static void defaults_are_80_GiB_and_2_MiB_pages(void **unused)
{
    (void)unused;
    write_file(path_in_dir("seventy.trace"), "coop-trace 1\nA 1 75161927680 0\nF 1\n");
    for (int fits = 1; fits >= 0; fits--) {
        if (fits)
            assert_int_equal(RUN("--json", "--policy", "ideal", path_in_dir("seventy.trace")), 0);
        else
            assert_int_equal(RUN("--json", "--policy", "ideal", "--capacity", "69G",
                                 path_in_dir("seventy.trace")),
                             0);
        json_t *rows = read_json_lines();
        assert_int_equal(json_array_size(rows), 1);
        json_t *oom = json_object_get(json_array_get(rows, 0), "oom_event");
        assert_true(fits ? json_is_null(oom) : json_integer_value(oom) == 0);
        json_decref(rows);
    }
    unlink(path_in_dir("seventy.trace"));
    assert_int_equal(RUN("--json", "--policy", "coop", path_in_dir("two.trace")), 0);
    json_t *rows = read_json_lines();
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "map_bytes")),
                     2 * MiB);
    json_decref(rows);
}

/* The policy names of the last --json run, in order, joined by spaces. */
static char *policies_of_last_run(void)
{
    static char names[1024];
    names[0] = '\0';
    json_t *rows = read_json_lines();
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(rows, i), "policy"));
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? " " : "",
                 name ? name : "?");
    }
    json_decref(rows);
    return names;
}

/* Without --policy every policy runs, in the listed order, then recorded. */
static void default_policies_end_with_recorded(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--json", path_in_dir("segment.trace")), 0);
    char want[1024] = "";
    size_t n;
    const replay_policy_ops *const *all = replay_policy_all(&n);
    for (size_t i = 0; i < n; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s ", all[i]->name);
    strcat(want, "recorded");
    assert_string_equal(policies_of_last_run(), want);
}

/* recorded's row needs recorded segments: segment events do, even when none
 * is held at the end; and a trace recorded by coop says so only where the
 * recorded row is shown. */
static void recorded_rows_and_their_notes(void **unused)
{
    (void)unused;
    assert_int_equal(RUN("--json", "--policy", "recorded", path_in_dir("freed-segment.trace")), 0);
    assert_string_equal(policies_of_last_run(), "recorded");
    assert_string_equal(slurp("err.txt"), "");
    assert_int_equal(RUN("--json", "--policy", "ideal", path_in_dir("by-coop.trace")), 0);
    assert_string_equal(slurp("err.txt"), "");
    assert_int_equal(RUN("--json", "--policy", "ideal,recorded", path_in_dir("by-coop.trace")), 0);
    if (!strstr(slurp("err.txt"), "by-coop.trace: recorded by coop"))
        fail_msg("no note that coop recorded it: '%s'", slurp("err.txt"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_exits_zero),
        cmocka_unit_test(bad_arguments_exit_two),
        cmocka_unit_test(unreadable_traces_exit_two),
        cmocka_unit_test(bad_trace_among_good_ones_is_named_and_the_rest_replayed),
        cmocka_unit_test(bad_trace_leaves_the_timeline),
        cmocka_unit_test(no_row_leaves_the_timeline),
        cmocka_unit_test(skipped_policies_are_not_a_missing_row),
        cmocka_unit_test(long_path_error_is_cut_between_characters),
        cmocka_unit_test(traces_are_freed_one_by_one),
        cmocka_unit_test(json_rows_have_the_issue_keys),
        cmocka_unit_test(capacity_too_small_reports_oom),
        cmocka_unit_test(oom_row_names_its_event),
        cmocka_unit_test(oom_on_the_first_allocation_has_no_fragmentation),
        cmocka_unit_test(recorded_above_capacity_has_no_minimum),
        cmocka_unit_test(timeline_is_written),
        cmocka_unit_test(timeline_repeats_at_another_base),
        cmocka_unit_test(timeline_stops_at_the_oom),
        cmocka_unit_test(empty_trace_has_no_timing),
        cmocka_unit_test(non_default_torch_settings_are_flagged),
        cmocka_unit_test(default_policies_end_with_recorded),
        cmocka_unit_test(recorded_rows_and_their_notes),
        cmocka_unit_test(defaults_are_80_GiB_and_2_MiB_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
