/*
 * remat_loop_memory: the host memory a remat context keeps over a long
 * training loop, with record reclamation (src/remat/remat_collect.c) and
 * without it (the internal collect_at set out of reach, as before
 * reclamation existed). A measuring tool, built by make check (so that it
 * keeps compiling), not a test. From a built tree:
 *
 *   tests/remat_loop_memory STEPS coop|dtr collect|keep
 *
 * The loop, per step: a forward pass of LAYERS layers (each activation
 * from the previous one and the layer's parameter, plus a second, cheap
 * output read by the next layer), a backward pass (each gradient from the
 * next gradient and the layer's activations, releasing the activations as
 * it goes, as autograd frees saved tensors), and the parameters' gradients
 * released after the update (written through the parameters' data, as
 * include/coop.h advises). The pool holds about a third of a step's
 * activations, so every step evicts and recomputes.
 *
 * Prints, every STEPS / 10 steps: the records held, the records reclaimed
 * so far, union-find nodes, the process's resident set (VmRSS) and peak
 * (VmHWM) in KiB, and the evictions and recomputations so far.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"
#include "remat/remat_internal.h"

#define LAYERS 48
#define KiB 1024u

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t, (void)producer, (void)inputs, (void)n, (void)out, (void)user;
    return COOP_OK;
}

static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k))
            v = strtol(line + k, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static void check(coop_status st, const char *what)
{
    if (st) {
        fprintf(stderr, "remat_loop_memory: %s: %s\n", what, coop_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[2], "coop") && strcmp(argv[2], "dtr")) ||
        (strcmp(argv[3], "collect") && strcmp(argv[3], "keep"))) {
        fprintf(stderr, "usage: %s STEPS coop|dtr collect|keep\n", argv[0]);
        return 2;
    }
    long steps = strtol(argv[1], NULL, 10);
    coop_config c;
    coop_config_default(&c);
    c.use_vmm = false;
    c.page_size = 4096;
    c.capacity = c.segment_size = (size_t)LAYERS * 64 * KiB;
    coop_pool *pool;
    check(coop_pool_create(&c, &pool), "pool");
    coop_remat_config cfg = {.policy = strcmp(argv[2], "coop") ? COOP_REMAT_DTR : COOP_REMAT_COOP,
                             .recompute = recompute};
    coop_remat *r;
    check(coop_remat_create(pool, &cfg, &r), "context");
    if (!strcmp(argv[3], "keep"))
        r->collect_at = SIZE_MAX;
    coop_tensor *param[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        check(coop_tensor_create(r, 16 * KiB, 0, NULL, NULL, 0, 0, &param[l]), "parameter");
    printf("step records reclaimed uf_nodes rss_kib hwm_kib evictions recomputes\n");
    for (long s = 1; s <= steps; s++) {
        coop_tensor *act[LAYERS + 1], *side[LAYERS + 1];
        check(coop_tensor_create(r, 96 * KiB, 1000, NULL, NULL, 0, COOP_TENSOR_EVICTABLE, &act[0]),
              "input");
        side[0] = act[0];
        for (int l = 0; l < LAYERS; l++) {
            coop_tensor *in[3] = {act[l], param[l], side[l]};
            for (int i = 0; i < 3; i++)
                check(coop_tensor_pin(r, in[i], NULL), "pin");
            size_t sizes[2] = {96 * KiB, 8 * KiB};
            coop_tensor *out[2];
            check(coop_tensor_create_outputs(r, 2, sizes, 2000 + 100 * (uint64_t)l, NULL, in, 3,
                                             COOP_TENSOR_EVICTABLE, out),
                  "forward");
            for (int i = 0; i < 3; i++)
                check(coop_tensor_unpin(r, in[i]), "unpin");
            act[l + 1] = out[0];
            side[l + 1] = out[1];
        }
        coop_tensor *grad = act[LAYERS], *pgrad[LAYERS];
        check(coop_tensor_alias(r, act[LAYERS], &grad), "loss");
        for (int l = LAYERS - 1; l >= 0; l--) {
            coop_tensor *in[3] = {grad, act[l], param[l]};
            for (int i = 0; i < 3; i++)
                check(coop_tensor_pin(r, in[i], NULL), "pin");
            coop_tensor *g[2];
            size_t sizes[2] = {96 * KiB, 16 * KiB};
            check(coop_tensor_create_outputs(r, 2, sizes, 3000, NULL, in, 3, COOP_TENSOR_EVICTABLE,
                                             g),
                  "backward");
            for (int i = 0; i < 3; i++)
                check(coop_tensor_unpin(r, in[i]), "unpin");
            check(coop_tensor_release(r, grad), "release");
            check(coop_tensor_release(r, act[l + 1]), "release");
            check(coop_tensor_release(r, side[l + 1]), "release");
            grad = g[0];
            pgrad[l] = g[1];
        }
        check(coop_tensor_release(r, grad), "release");
        check(coop_tensor_release(r, act[0]), "release");
        for (int l = 0; l < LAYERS; l++) { /* the update reads them; then they go */
            check(coop_tensor_access(r, pgrad[l], NULL), "update");
            check(coop_tensor_release(r, pgrad[l]), "release");
        }
        if (s % (steps / 10 ? steps / 10 : 1) == 0) {
            coop_remat_stats st;
            coop_remat_get_stats(r, &st);
            printf("%ld %llu %llu %u %ld %ld %llu %llu\n", s, (unsigned long long)st.records,
                   (unsigned long long)st.records_reclaimed, r->uf.count, status_kib("VmRSS:"),
                   status_kib("VmHWM:"), (unsigned long long)st.evictions,
                   (unsigned long long)st.recomputes);
        }
    }
    coop_remat_destroy(r);
    coop_pool_destroy(pool);
    return 0;
}
