/*
 * The remat API as a user drives it (docs/remat.md, section 4; written by
 * rev30-F knowing only include/coop.h): a chain of 20 layers whose
 * activations do not all fit (capacity 12 of them), a forward pass with
 * one recomputable in-place op (a ReLU on layer 15) and one view (of layer
 * 10), then a backward pass that reads the activations in reverse, pinned
 * while in use, so that evicted ones are recomputed, inputs first. The
 * values must equal those of the same computation in plain memory, under
 * each policy; evictions and recomputations must have happened.
 *
 * The host backend's buffers are PROT_NONE (touching one faults), so the
 * values live in a shadow table keyed by buffer address, as a program on
 * the host backend keeps them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"

#define LAYERS 20
#define W 1024 /* floats per activation */
#define BYTES (W * sizeof(float))

/* ---- the owner's values, by buffer address ---- */

#define SLOTS 256
static struct {
    const void *addr;
    float v[W];
} shadow[SLOTS];

static float *S(const void *addr)
{
    size_t h = ((uintptr_t)addr >> 9) % SLOTS;
    while (shadow[h].addr && shadow[h].addr != addr)
        h = (h + 1) % SLOTS;
    shadow[h].addr = addr;
    return shadow[h].v;
}

/* ---- the ops: what the producer pointer names ---- */

enum op_kind { OP_LAYER, OP_RELU, OP_ONES, OP_GRAD };
typedef struct op {
    enum op_kind kind;
    int layer;
} op;

static void layer_fwd(int i, const float *in, float *out)
{
    for (int j = 0; j < W; j++)
        out[j] = in[j] * 0.9f + (float)(((i * 7 + j) % 13) - 6) * 0.1f;
}

static void relu(const float *in, float *out)
{
    for (int j = 0; j < W; j++)
        out[j] = in[j] > 0 ? in[j] : 0;
}

static void grad_fwd(const float *g, const float *a, float *out)
{
    for (int j = 0; j < W; j++)
        out[j] = g[j] * 0.9f + a[j] * 0.001f;
}

static void ones(float *out)
{
    for (int j = 0; j < W; j++)
        out[j] = 1.0f;
}

typedef struct owner {
    unsigned evictions_told, recomputes_run;
} owner;

static void on_evict(coop_tensor *t, void *user)
{
    (void)t;
    ((owner *)user)->evictions_told++;
}

static coop_status recompute(coop_tensor *t, void *producer, void *const *inputs, size_t n,
                             void *out, void *user)
{
    (void)t;
    const op *o = producer;
    ((owner *)user)->recomputes_run++;
    switch (o->kind) {
    case OP_LAYER:
        assert_int_equal(n, 1);
        layer_fwd(o->layer, S(inputs[0]), S(out));
        return COOP_OK;
    case OP_RELU: /* in place: inputs[0] is the old value */
        assert_int_equal(n, 1);
        relu(S(inputs[0]), S(out));
        return COOP_OK;
    case OP_ONES:
        assert_int_equal(n, 0);
        ones(S(out));
        return COOP_OK;
    case OP_GRAD:
        assert_int_equal(n, 2);
        grad_fwd(S(inputs[0]), S(inputs[1]), S(out));
        return COOP_OK;
    }
    return COOP_ERR_INVALID;
}

static float ref_act[LAYERS + 1][W], ref_grad[W];

static void reference(void)
{
    for (int j = 0; j < W; j++)
        ref_act[0][j] = (float)sin(j * 0.01);
    for (int i = 1; i <= LAYERS; i++) {
        layer_fwd(i, ref_act[i - 1], ref_act[i]);
        if (i == 15)
            relu(ref_act[15], ref_act[15]);
    }
    float g[W], g2[W];
    ones(g);
    for (int i = LAYERS; i >= 1; i--) {
        grad_fwd(g, ref_act[i - 1], g2);
        memcpy(g, g2, sizeof g);
    }
    memcpy(ref_grad, g, sizeof g);
}

static bool same(const float *a, const float *b)
{
    return memcmp(a, b, BYTES) == 0;
}

static void chain_forward_backward(void **state)
{
    coop_remat_policy policy = *(coop_remat_policy *)*state;
    memset(shadow, 0, sizeof shadow);
    reference();
    coop_config cfg;
    coop_config_default(&cfg);
    cfg.use_vmm = false;
    cfg.page_size = 512;
    cfg.capacity = 12 * BYTES;
    cfg.segment_size = cfg.capacity;
    coop_pool *pool;
    assert_int_equal(coop_pool_create(&cfg, &pool), COOP_OK);
    owner me = {0};
    coop_remat_config rc = {
        .policy = policy, .on_evict = on_evict, .recompute = recompute, .user = &me};
    coop_remat *r;
    assert_int_equal(coop_remat_create(pool, &rc, &r), COOP_OK);

    static op layer_ops[LAYERS + 1], grad_ops[LAYERS + 1];
    static const op relu_op = {OP_RELU, 15}, ones_op = {OP_ONES, 0};
    coop_tensor *act[LAYERS + 1], *view10;
    /* the input is data, not recomputable: not evictable, held to the end */
    assert_int_equal(coop_tensor_create(r, BYTES, 0, NULL, NULL, 0, 0, &act[0]), COOP_OK);
    memcpy(S(coop_tensor_data(act[0])), ref_act[0], BYTES);

    for (int i = 1; i <= LAYERS; i++) {
        layer_ops[i] = (op){OP_LAYER, i};
        void *in;
        assert_int_equal(coop_tensor_pin(r, act[i - 1], &in), COOP_OK);
        assert_int_equal(coop_tensor_create(r, BYTES, 1000 * (uint64_t)i, &layer_ops[i],
                                            &act[i - 1], 1, COOP_TENSOR_EVICTABLE, &act[i]),
                         COOP_OK);
        layer_fwd(i, S(in), S(coop_tensor_data(act[i]))); /* the owner computes */
        assert_int_equal(coop_tensor_unpin(r, act[i - 1]), COOP_OK);
        if (i == 15) { /* recomputable in-place: same buffer, the op applied by the owner */
            void *buf;
            assert_int_equal(coop_tensor_pin(r, act[15], &buf), COOP_OK);
            assert_int_equal(coop_tensor_mutate(r, act[15], 200, (void *)&relu_op, NULL, 0, NULL),
                             COOP_OK);
            assert_ptr_equal(coop_tensor_data(act[15]), buf);
            relu(S(buf), S(buf));
            assert_int_equal(coop_tensor_unpin(r, act[15]), COOP_OK);
        }
    }
    assert_int_equal(coop_tensor_alias(r, act[10], &view10), COOP_OK);
    coop_remat_stats st;
    coop_remat_get_stats(r, &st);
    assert_true(st.evictions > 0); /* 21 activations, room for 12 */
    assert_int_equal(me.evictions_told, st.evictions);

    /* backward: g_{i-1} = f(g_i, a_{i-1}); layer 10 read through its view */
    coop_tensor *g;
    assert_int_equal(
        coop_tensor_create(r, BYTES, 10, (void *)&ones_op, NULL, 0, COOP_TENSOR_EVICTABLE, &g),
        COOP_OK);
    ones(S(coop_tensor_data(g)));
    for (int i = LAYERS; i >= 1; i--) {
        coop_tensor *a = i - 1 == 10 ? view10 : act[i - 1];
        void *pa, *pg;
        assert_int_equal(coop_tensor_pin(r, a, &pa), COOP_OK);
        assert_int_equal(coop_tensor_pin(r, g, &pg), COOP_OK);
        assert_true(same(S(pa), ref_act[i - 1]));
        grad_ops[i] = (op){OP_GRAD, i};
        coop_tensor *in2[2] = {g, a}, *g2;
        assert_int_equal(
            coop_tensor_create(r, BYTES, 500, &grad_ops[i], in2, 2, COOP_TENSOR_EVICTABLE, &g2),
            COOP_OK);
        grad_fwd(S(pg), S(pa), S(coop_tensor_data(g2)));
        assert_int_equal(coop_tensor_unpin(r, g), COOP_OK);
        assert_int_equal(coop_tensor_unpin(r, a), COOP_OK);
        assert_int_equal(coop_tensor_unpin(r, a), COOP_ERR_INVALID); /* twice: refused */
        assert_int_equal(coop_tensor_release(r, g), COOP_OK);
        assert_int_equal(coop_tensor_release(r, act[i]), COOP_OK);
        g = g2;
    }
    void *p;
    assert_int_equal(coop_tensor_access(r, g, &p), COOP_OK);
    assert_true(same(S(p), ref_grad));
    assert_int_equal(coop_tensor_access(r, act[LAYERS], &p), COOP_ERR_INVALID); /* released */
    assert_non_null(strstr(coop_last_error(), "coop_tensor_access: tensor"));
    coop_remat_get_stats(r, &st);
    assert_true(st.recomputes > 0);
    assert_int_equal(me.recomputes_run, st.recomputes);
    assert_int_equal(me.evictions_told, st.evictions);
    printf("policy %d: evictions %llu, recomputes %llu (%llu ns), searches %llu, clock %llu, "
           "resident %llu bytes\n",
           (int)policy, (unsigned long long)st.evictions, (unsigned long long)st.recomputes,
           (unsigned long long)st.recompute_ns, (unsigned long long)st.searches,
           (unsigned long long)st.clock, (unsigned long long)st.resident_bytes);
    assert_int_equal(coop_pool_check(pool), COOP_OK);

    /* destroying the context with tensors live and one pinned frees them all */
    assert_int_equal(coop_tensor_pin(r, g, &p), COOP_OK);
    coop_remat_destroy(r);
    coop_stats ps;
    coop_get_stats(pool, &ps);
    assert_int_equal(ps.allocated_bytes.current, 0);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_pool_destroy(pool);
}

int main(void)
{
    static const coop_remat_policy policies[] = {COOP_REMAT_COOP, COOP_REMAT_DTR, COOP_REMAT_LRU};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(chain_forward_backward, (void *)&policies[0]),
        cmocka_unit_test_prestate(chain_forward_backward, (void *)&policies[1]),
        cmocka_unit_test_prestate(chain_forward_backward, (void *)&policies[2]),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
