/* The sweep of host_alloc_sweep.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_alloc_fault.h"
#include "host_alloc_sweep.h"
#include "status.h"

/* Bounds one sweep: an operation making more allocation calls than this is
 * a bad pick of input for a test that must stay seconds long. */
#define MAX_CALLS 20000

static long current_call; /* the call being failed, for messages */

long host_alloc_sweep_call(void)
{
    return current_call;
}

long host_alloc_sweep(const operation *op)
{
    for (long n = 1; n <= MAX_CALLS + 1; n++) {
        current_call = n;
        long before = host_fault_live();
        coop_clear_error();
        host_fault_arm(n);
        coop_status st = op->run(op->ctx);
        bool hit = host_fault_disarm();
        if (st == COOP_OK) {
            op->cleanup(op->ctx);
        } else {
            if (!hit)
                fail_msg("%s: failed without a fault (call %ld): %s: %s", op->name, n,
                         coop_strerror(st), coop_last_error());
            if (st != COOP_ERR_HOST_NOMEM)
                fail_msg("%s: allocation call %ld failed: status %s, not host-nomem: %s", op->name,
                         n, coop_strerror(st), coop_last_error());
            if (!coop_last_error()[0])
                fail_msg("%s: allocation call %ld failed without a message", op->name, n);
            if (op->check_failed)
                op->check_failed(op->ctx);
        }
        long after = host_fault_live();
        if (after != before)
            fail_msg("%s: allocation call %ld failed: %ld blocks leaked (status %s)", op->name, n,
                     after - before, coop_strerror(st));
        if (!hit) {
            if (st != COOP_OK)
                fail_msg("%s: unreachable", op->name);
            return n - 1;
        }
    }
    fail_msg("%s: more than %d allocation calls", op->name, MAX_CALLS);
    return -1;
}

void host_alloc_report(const char *what, long calls)
{
    printf("%-40s %5ld allocation calls failed in turn\n", what, calls);
}
