/*
 * Not a test (timings belong in benchmarks): the cost of a malloc+free pair
 * while frees are pending on a busy stream, the figure in
 * docs/measured-host.md's "Pending frees". PENDING blocks of 4 KiB are used on stream 7
 * (coop_record_stream), which is held busy, and freed; then PAIRS pairs of
 * 1 KiB on stream 1 are timed. Host backend, never_wait (nothing waits for
 * the held stream).
 *
 *   tests/pending_pairs PENDING [PAIRS]   e.g. for n in 0 100 1000 10000; do
 *                                              tests/pending_pairs $n; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "coop.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s PENDING [PAIRS]\n", argv[0]);
        return 2;
    }
    long pending = strtol(argv[1], NULL, 10);
    long pairs = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
    if (pending < 0 || pairs <= 0) {
        fprintf(stderr, "%s: PENDING >= 0 and PAIRS > 0\n", argv[0]);
        return 2;
    }
    coop_config c;
    coop_config_default(&c);
    c.capacity = 64ull << 30;
    c.never_wait = true;
    coop_pool *p;
    if (coop_pool_create(&c, &p) != COOP_OK || coop_host_hold_stream(p, 7, true) != COOP_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], coop_last_error());
        return 1;
    }
    for (long i = 0; i < pending; i++) {
        void *x = coop_malloc(p, 4096, 1, 0, NULL);
        if (!x || coop_record_stream(p, x, 7) != COOP_OK || coop_free(p, x) != COOP_OK) {
            fprintf(stderr, "%s: %s\n", argv[0], coop_last_error());
            return 1;
        }
    }
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++)
        coop_free(p, coop_malloc(p, 1024, 1, 0, NULL));
    double t1 = now_ns();
    printf("%ld pending: %.1f ns per malloc+free pair\n", pending, (t1 - t0) / (double)pairs);
    coop_pool_destroy(p);
    return 0;
}
