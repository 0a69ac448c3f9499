/*
 * Host allocation fault sweeps (host_alloc_sweep.h) through coop replay's
 * engine and every placement policy: a small hand-built trace (two streams,
 * sizes from 1 KiB to 30 MiB, frees between) replayed at 160 MiB. A refused run
 * returns COOP_ERR_HOST_NOMEM (never an out-of-memory row: the host failed,
 * not the device), the policy's own check holds right after the malloc that
 * met the fault, and a recovered run gives the unfaulted run's figures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "replay/engine.h"
#include "replay/policy.h"
#include "status.h"

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"

#define MiB (1ull << 20)
#define CAPACITY (160 * MiB)

/* The policy under test; its malloc is wrapped to check the policy's state
 * after every failed call (a failed split must leave the blocks whole). */
static const replay_policy_ops *under_test;

static coop_status checked_malloc(void *state, uint64_t size, uint64_t stream, uintptr_t *addr)
{
    coop_status st = under_test->malloc(state, size, stream, addr);
    if (st != COOP_OK && under_test->check) {
        char why[512];
        snprintf(why, sizeof why, "%s", coop_last_error());
        if (under_test->check(state) != COOP_OK)
            fail_msg("%s: allocation call %ld: after '%s' the check fails: %s", under_test->name,
                     host_alloc_sweep_call(), why, coop_last_error());
        coop_set_error(st, "%s", why); /* the malloc's own message */
    }
    return st;
}

typedef struct replay_ctx {
    replay_prepared p;
    replay_policy_ops ops; /* under_test with checked_malloc */
    replay_run run, unfaulted;
} replay_ctx;

static coop_status replay_run_op(void *ctx)
{
    replay_ctx *c = ctx;
    return replay_run_trace(&c->p, &c->ops, CAPACITY, 2 * MiB, NULL, &c->run);
}

/* A run the fault did not stop is the unfaulted run: the same OOM verdict
 * and byte figures (fragmentation may be absent where its bookkeeping ran
 * out of host memory: jemalloc's free-space log). */
static void replay_cleanup(void *ctx)
{
    replay_ctx *c = ctx;
    const replay_run *r = &c->run, *u = &c->unfaulted;
    if (r->oom != u->oom || r->peak_reserved != u->peak_reserved ||
        r->peak_active != u->peak_active || r->map_bytes != u->map_bytes ||
        r->final_reserved != u->final_reserved)
        fail_msg("%s: allocation call %ld: a recovered run differs (oom %d, peak %llu, map %llu; "
                 "unfaulted: oom %d, peak %llu, map %llu)",
                 c->ops.name, host_alloc_sweep_call(), r->oom, (unsigned long long)r->peak_reserved,
                 (unsigned long long)r->map_bytes, u->oom, (unsigned long long)u->peak_reserved,
                 (unsigned long long)u->map_bytes);
}

/* 32 events: 16 blocks of 1 KiB to 30 MiB on two streams; each even one is
 * freed once the next is allocated, the odd ones at the end. */
static void build_trace(trace *t, trace_event *events)
{
    static const uint64_t sizes[] = {1024, 3 * MiB / 2, 300 * 1024, 12 * MiB, 4096, 30 * MiB};
    size_t n = 0;
    for (uint32_t i = 0; i < 16; i++) {
        events[n++] = (trace_event){
            .kind = TRACE_ALLOC, .id = i, .size = sizes[i % 6], .stream = i % 2, .time_us = -1};
        if (i % 2)
            events[n++] = (trace_event){.kind = TRACE_FREE,
                                        .id = i - 1,
                                        .size = sizes[(i - 1) % 6],
                                        .stream = (i - 1) % 2,
                                        .time_us = -1};
    }
    for (uint32_t i = 1; i < 16; i += 2)
        events[n++] = (trace_event){
            .kind = TRACE_FREE, .id = i, .size = sizes[i % 6], .stream = i % 2, .time_us = -1};
    *t = (trace){.events = events, .num_events = n, .num_ids = 16};
}

static void policies(void **state)
{
    (void)state;
    trace_event events[32];
    trace t;
    build_trace(&t, events);
    size_t count;
    const replay_policy_ops *const *all = replay_policy_all(&count);
    for (size_t i = 0; i < count; i++) {
        replay_ctx c = {0};
        under_test = all[i];
        c.ops = *all[i];
        c.ops.malloc = checked_malloc;
        assert_int_equal(replay_prepare(&t, &c.p), COOP_OK);
        assert_int_equal(replay_run_op(&c), COOP_OK);
        c.unfaulted = c.run;
        assert_false(c.unfaulted.oom);
        operation op = {c.ops.name, replay_run_op, replay_cleanup, NULL, &c};
        host_alloc_report(c.ops.name, host_alloc_sweep(&op));
        replay_prepared_free(&c.p);
    }
}

int main(void)
{
    host_fault_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
