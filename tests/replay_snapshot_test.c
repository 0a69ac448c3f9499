/*
 * Replay on the real PyTorch snapshots in ../shared/workloads (skipped when
 * that folder is absent): the torch emulation tracks what PyTorch really
 * reserved, and coop needs less than both, close to the live peak.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "replay/engine.h"
#include "replay/policy.h"
#include "replay/recorded.h"
#include "trace/trace.h"

#define PAGE (2ull << 20)
#define DEVICE (80ull << 30)

/* The workloads sit beside the project: ../shared from a checkout, and
 * ../../shared from a worktree one level further down. */
static const char *const workload_dirs[] = {
    COOP_TEST_SRCDIR "/../shared/workloads/torch-snapshots",
    COOP_TEST_SRCDIR "/../../shared/workloads/torch-snapshots",
};
static const char *const snapshot_names[] = {
    "cs336-transformer-ctx128-fullstep.pickle.gz",
    "cs336-transformer-ctx128-forward.pickle.gz",
    "cs336-b-memory-snapshot.pickle.gz",
};
static const char *snapshot_dir;

typedef struct figures {
    uint64_t peak_live, peak_reserved, min_capacity, map_bytes;
} figures;

static figures measure(const replay_prepared *p, const replay_policy_ops *ops)
{
    replay_run run;
    assert_int_equal(replay_run_trace(p, ops, DEVICE, PAGE, NULL, &run), COOP_OK);
    assert_false(run.oom);
    figures f = {.peak_live = p->peak_live, .peak_reserved = run.peak_reserved};
    replay_run at_min;
    assert_int_equal(replay_min_capacity(p, ops, PAGE, p->peak_live, run.peak_reserved,
                                         &f.min_capacity, &at_min),
                     COOP_OK);
    f.map_bytes = at_min.map_bytes;
    return f;
}

static void snapshot_targets(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof snapshot_names / sizeof snapshot_names[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", snapshot_dir, snapshot_names[i]);
        trace t;
        if (trace_read(path, &t) != COOP_OK)
            fail_msg("%s", coop_last_error());
        replay_prepared p;
        assert_int_equal(replay_prepare(&t, &p), COOP_OK);
        replay_recorded rec;
        assert_int_equal(replay_recorded_compute(&t, &rec, NULL), COOP_OK);
        assert_true(rec.available);
        figures coop = measure(&p, &replay_policy_coop);
        figures torch = measure(&p, &replay_policy_torch);
        printf("%s: live %llu coop min %llu map %llu, torch min %llu peak %llu, recorded %llu\n",
               t.name, (unsigned long long)p.peak_live, (unsigned long long)coop.min_capacity,
               (unsigned long long)coop.map_bytes, (unsigned long long)torch.min_capacity,
               (unsigned long long)torch.peak_reserved, (unsigned long long)rec.peak_reserved);
        /* coop: within 2% of the live peak, at most 2x the live peak mapped */
        assert_true(coop.min_capacity <= p.peak_live + p.peak_live / 50);
        assert_true(coop.map_bytes <= 2 * p.peak_live);
        assert_true(coop.min_capacity < torch.min_capacity);
        assert_true(coop.min_capacity < rec.peak_reserved);
        /* the emulation tracks PyTorch's real reservation within 5% */
        if (t.has_segment_events) {
            double diff = (double)torch.peak_reserved - (double)rec.peak_reserved;
            assert_true(diff < 0.05 * (double)rec.peak_reserved);
            assert_true(-diff < 0.05 * (double)rec.peak_reserved);
        }
        replay_prepared_free(&p);
        trace_free(&t);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof workload_dirs / sizeof workload_dirs[0] && !snapshot_dir; i++)
        if (access(workload_dirs[i], R_OK) == 0)
            snapshot_dir = workload_dirs[i];
    if (!snapshot_dir) {
        printf("SKIP: %s is absent\n", workload_dirs[0]);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(snapshot_targets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
