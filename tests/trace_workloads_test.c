/*
 * The readers on the real traces in ../shared/workloads, or $COOP_WORKLOADS
 * (skipped when that folder is absent): event counts of the PyTorch snapshots against the
 * figures in its README, the readers' invariants, text round trips, every
 * snapshot cut short at many points, the minimalloc CSVs against their
 * budgets, and the DTR logs through trace_read and the text writer.
 */
#include <dirent.h>
#include <sys/stat.h>

#include "trace_fixture.h"

#include "trace/input.h"

/* $COOP_WORKLOADS, else the folder beside the source tree. */
static const char *workloads = COOP_TEST_SRCDIR "/../shared/workloads";

typedef struct snapshot_figures {
    const char *file;
    size_t entries;       /* device trace entries (workloads/README.md) */
    size_t live_at_start; /* blocks live before recording began */
    uint32_t ids;
    size_t final_segments;
    int has_segment_events;
} snapshot_figures;

static const snapshot_figures snapshots[] = {
    {"cs336-transformer-ctx128-fullstep.pickle.gz", 19342, 324, 7095, 1010, 1},
    {"cs336-transformer-ctx128-forward.pickle.gz", 4657, 324, 2382, 516, 1},
    {"cs336-b-memory-snapshot.pickle.gz", 5163, 229, 1950, 216, 0},
};

static void snapshot_path(char *buf, size_t cap, const char *file)
{
    snprintf(buf, cap, "%s/torch-snapshots/%s", workloads, file);
}

static void test_snapshot_counts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof snapshots / sizeof snapshots[0]; i++) {
        const snapshot_figures *s = &snapshots[i];
        char path[512];
        snapshot_path(path, sizeof path, s->file);
        trace t;
        if (trace_read(path, &t) != COOP_OK)
            fail_msg("%s", coop_last_error());
        fixture_check_invariants(&t); /* one alloc per id, each freed at most once */
        assert_int_equal(t.num_events - t.num_live_at_start, s->entries);
        assert_int_equal(t.num_live_at_start, s->live_at_start);
        assert_int_equal(t.num_ids, s->ids);
        assert_int_equal(t.num_final_segments, s->final_segments);
        assert_int_equal(t.has_segment_events, s->has_segment_events);
        /* every alloc and segment event knows its address and time */
        for (size_t e = t.num_live_at_start; e < t.num_events; e++) {
            assert_true(t.events[e].addr != 0);
            assert_true(t.events[e].time_us > 0);
        }
        trace_free(&t);
    }
}

static void test_snapshot_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof snapshots / sizeof snapshots[0]; i++) {
        char path[512], out[300];
        snapshot_path(path, sizeof path, snapshots[i].file);
        fixture_path(out, sizeof out, i % 2 ? "rt.trace.gz" : "rt.trace");
        trace a, b;
        assert_int_equal(trace_read_pickle(path, &a), COOP_OK);
        assert_int_equal(trace_write_text(&a, out), COOP_OK);
        if (trace_read(out, &b) != COOP_OK)
            fail_msg("%s", coop_last_error());
        fixture_assert_same_trace(&a, &b);
        trace_free(&a);
        trace_free(&b);
    }
}

/* The smallest snapshot cut at 97 points of its decompressed bytes, and
 * its compressed file at 41 points: every cut is an error with a position. */
static void test_snapshot_truncated(void **state)
{
    (void)state;
    char path[512], cut[300];
    snapshot_path(path, sizeof path, "cs336-b-memory-snapshot.pickle.gz");
    fixture_path(cut, sizeof cut, "cut.pickle");
    unsigned char *data;
    size_t len;
    assert_int_equal(trace_input_slurp(path, &data, &len), COOP_OK);
    for (size_t k = 1; k <= 97; k++) {
        size_t at = len / 97 * k + k * 7919 % 1000; /* spread out, not aligned */
        if (at >= len)
            continue;
        fixture_write(cut, data, at, 0);
        trace t;
        if (trace_read(cut, &t) == COOP_OK)
            fail_msg("cut at %zu of %zu accepted", at, len);
        assert_non_null(strstr(coop_last_error(), "byte"));
    }
    free(data);
    size_t gz_len;
    data = fixture_read(path, &gz_len);
    for (size_t k = 1; k < 42; k++) {
        size_t at = gz_len / 42 * k;
        fixture_write(cut, data, at, 0);
        trace t;
        if (trace_read_pickle(cut, &t) == COOP_OK)
            fail_msg("compressed cut at %zu of %zu accepted", at, gz_len);
    }
    free(data);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Each CSV packs into the budget in its name, so its peak of live bytes
 * cannot exceed it. */
static void test_minimalloc(void **state)
{
    (void)state;
    char dir_path[512];
    snprintf(dir_path, sizeof dir_path, "%s/minimalloc", workloads);
    DIR *dir = opendir(dir_path);
    if (!dir)
        skip();
    int files = 0;
    struct dirent *d;
    while ((d = readdir(dir)) != NULL) {
        if (!ends_with(d->d_name, ".csv"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir_path, d->d_name);
        uint64_t budget = strtoull(strchr(d->d_name, '.') + 1, NULL, 10);
        trace t;
        if (trace_read(path, &t) != COOP_OK)
            fail_msg("%s", coop_last_error());
        fixture_check_invariants(&t);
        assert_int_equal(t.num_events, 2 * (size_t)t.num_ids);
        uint64_t live = 0, peak = 0;
        for (size_t i = 0; i < t.num_events; i++) {
            if (t.events[i].kind == TRACE_ALLOC)
                live += t.events[i].size;
            else
                live -= t.events[i].size;
            peak = live > peak ? live : peak;
        }
        assert_int_equal(live, 0);
        if (peak > budget)
            fail_msg("%s: peak %llu over budget %llu", d->d_name, (unsigned long long)peak,
                     (unsigned long long)budget);
        printf("%s: %zu events, peak live %llu of %llu\n", d->d_name, t.num_events,
               (unsigned long long)peak, (unsigned long long)budget);
        trace_free(&t);
        files++;
    }
    closedir(dir);
    assert_true(files > 0);
}

/* The DTR logs: detected by content, read through trace_read (the remat
 * work's reader) into the canonical form, and written as text without loss. */
static void test_dtr_logs(void **state)
{
    (void)state;
    char dir_path[512];
    snprintf(dir_path, sizeof dir_path, "%s/dtr-logs", workloads);
    DIR *dir = opendir(dir_path);
    if (!dir)
        skip();
    struct dirent *d;
    int files = 0;
    while ((d = readdir(dir)) != NULL) {
        if (d->d_name[0] == '.')
            continue;
        char path[1024], out[300];
        snprintf(path, sizeof path, "%s/%s", dir_path, d->d_name);
        trace_format f;
        assert_int_equal(trace_detect_format(path, &f), COOP_OK);
        assert_int_equal(f, TRACE_FORMAT_DTR);
        trace a, b;
        if (trace_read(path, &a) != COOP_OK)
            fail_msg("%s", coop_last_error());
        /* The DTR reader does not go through trace_builder and leaves the
         * frees' size 0; the text format gives frees their alloc's size.
         * Compare in that canonical form. */
        size_t *alloc_at = calloc(a.num_ids ? a.num_ids : 1, sizeof *alloc_at);
        for (size_t i = 0; i < a.num_events; i++) {
            trace_event *e = &a.events[i];
            if (e->kind == TRACE_ALLOC) {
                assert_true(e->id < a.num_ids);
                alloc_at[e->id] = i;
            } else if (e->kind == TRACE_FREE || e->kind == TRACE_FREE_REQUESTED) {
                assert_true(e->id < a.num_ids);
                e->size = a.events[alloc_at[e->id]].size;
            }
        }
        free(alloc_at);
        fixture_check_invariants(&a);
        assert_true(a.num_events > 0);
        fixture_path(out, sizeof out, "dtr.trace.gz");
        assert_int_equal(trace_write_text(&a, out), COOP_OK);
        assert_int_equal(trace_read_text(out, &b), COOP_OK);
        fixture_assert_same_trace(&a, &b);
        trace_free(&a);
        trace_free(&b);
        files++;
    }
    closedir(dir);
    assert_true(files > 0);
}

int main(void)
{
    if (getenv("COOP_WORKLOADS"))
        workloads = getenv("COOP_WORKLOADS");
    char probe[512];
    snprintf(probe, sizeof probe, "%s/torch-snapshots", workloads);
    struct stat st;
    if (stat(probe, &st) != 0) {
        printf("SKIP: %s is absent (set COOP_WORKLOADS to the workloads folder)\n", probe);
        return 77;
    }
    fixture_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_counts),    cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_snapshot_truncated), cmocka_unit_test(test_minimalloc),
        cmocka_unit_test(test_dtr_logs),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_cleanup();
    return failed;
}
