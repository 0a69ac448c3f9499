/*
 * The allocator's essential sequence through the public API, for running on
 * a backend other than the host one (real CUDA driver, mock driver). Include
 * after <cmocka.h> and "coop.h". The pool is created by the caller with its
 * capacity >= 64 MiB; the sequence leaves it empty. side is a second stream
 * the caller created (a real driver refuses stream handles it never made).
 */
#ifndef COOP_TEST_POOL_SEQUENCE_H
#define COOP_TEST_POOL_SEQUENCE_H

#define SEQ_MIB (1ull << 20)

static int seq_count_block(const coop_block_info *block, void *ctx)
{
    (void)block;
    (*(size_t *)ctx)++;
    return 0;
}

static void run_pool_sequence(coop_pool *pool, coop_stream side)
{
    enum { N = 24 };
    static const size_t sizes[N] = {1,       511,           512,           513,     4096,    100000,
                                    1 << 20, 3 << 20,       (5 << 20) + 7, 777,     2 << 20, 12345,
                                    64,      8 << 20,       300,           1 << 16, 999999,  2,
                                    4097,    (1 << 21) - 1, 1000,          7 << 10, 1,       33333};
    void *ptrs[N];
    coop_status st;
    uint64_t requested = 0;
    coop_config config;
    coop_pool_config(pool, &config);
    /* Two streams, with VMM and without (segments): empty_cache waits for
     * both, so every segment is wholly free and idle and is released, the
     * free blocks of the two streams merged or not. (The sequence used one
     * stream without VMM for a core issue of empty_cache keeping such a
     * segment; it no longer does: segments audit, tests/README.md.) */
    const bool two_streams = true;
    for (int i = 0; i < N; i++) {
        coop_stream stream = two_streams && i % 2 ? side : 0;
        ptrs[i] = coop_malloc(pool, sizes[i], stream, COOP_ALLOC_LOW, &st);
        assert_int_equal(st, COOP_OK);
        assert_non_null(ptrs[i]);
        assert_int_equal((uintptr_t)ptrs[i] % 512, 0);
        requested += sizes[i];
        for (int j = 0; j < i; j++) {
            uintptr_t a = (uintptr_t)ptrs[i], b = (uintptr_t)ptrs[j];
            assert_true(a + sizes[i] <= b || b + sizes[j] <= a);
        }
    }
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_stats stats;
    coop_get_stats(pool, &stats);
    assert_int_equal(stats.allocation.current, N);
    assert_int_equal(stats.requested_bytes.current, (int64_t)requested);
    assert_true(stats.reserved_bytes.current >= stats.allocated_bytes.current);
    size_t blocks = 0;
    assert_int_equal(coop_walk(pool, NULL, seq_count_block, &blocks), COOP_OK);
    assert_true(blocks >= N);

    /* misuse: a distinct status, the pool untouched */
    assert_int_equal(coop_free(pool, (char *)ptrs[5] + 512), COOP_ERR_INTERIOR_PTR);
    int local;
    assert_int_equal(coop_free(pool, &local), COOP_ERR_FOREIGN_PTR);
    assert_int_equal(coop_pool_check(pool), COOP_OK);

    /* frees in a scattered order, one used on another stream */
    assert_int_equal(coop_record_stream(pool, ptrs[3], two_streams ? side : 0), COOP_OK);
    for (int i = 0; i < N; i += 2)
        assert_int_equal(coop_free(pool, ptrs[i]), COOP_OK);
    assert_int_equal(coop_free(pool, ptrs[0]), COOP_ERR_DOUBLE_FREE);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    for (int i = 1; i < N; i += 2)
        assert_int_equal(coop_free(pool, ptrs[i]), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);

    /* out of memory: NULL, COOP_ERR_NOMEM, a message with the numbers */
    void *huge = coop_malloc(pool, config.capacity + SEQ_MIB, 0, COOP_ALLOC_LOW, &st);
    assert_null(huge);
    assert_int_equal(st, COOP_ERR_NOMEM);
    assert_true(strlen(coop_last_error()) > 0);
    coop_get_stats(pool, &stats);
    assert_true(stats.num_ooms >= 1);

    /* high placement, then everything back */
    void *high = coop_malloc(pool, 4096, 0, COOP_ALLOC_HIGH, &st);
    assert_non_null(high);
    assert_int_equal(coop_free(pool, high), COOP_OK);
    assert_int_equal(coop_empty_cache(pool), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
    coop_get_stats(pool, &stats);
    assert_int_equal(stats.allocation.current, 0);
    assert_int_equal(stats.allocated_bytes.current, 0);
    /* no free is left pending: the event of the cross-stream use completed */
    assert_int_equal(stats.active.current, 0);
    assert_int_equal(stats.reserved_bytes.current, 0); /* pages unmapped, or segments freed */

    /* capacity: lowered, an allocation above it fails, raised again */
    assert_int_equal(coop_set_capacity(pool, 8 * SEQ_MIB), COOP_OK);
    void *too_big = coop_malloc(pool, 16 * SEQ_MIB, 0, COOP_ALLOC_LOW, &st);
    assert_null(too_big);
    assert_int_equal(st, COOP_ERR_NOMEM);
    void *fits = coop_malloc(pool, 4 * SEQ_MIB, 0, COOP_ALLOC_LOW, &st);
    assert_non_null(fits);
    assert_int_equal(coop_free(pool, fits), COOP_OK);
    assert_int_equal(coop_set_capacity(pool, config.capacity), COOP_OK);
    assert_int_equal(coop_pool_check(pool), COOP_OK);
}

#endif
