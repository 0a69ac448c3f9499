/*
 * Runs a host-backend test program's source on the CUDA backend over the
 * mock driver: include this, then the program's .c file. The program's
 * streams are small integers (0, 1, 2, ...); a driver accepts only streams
 * it created, so each is mapped to a stream created in the mock, both ways:
 * coop_malloc and coop_record_stream get the created stream, coop_walk's
 * visitors see the small integer again. coop_host_hold_stream holds the
 * created stream in the mock (events recorded on it stay NOT_READY until it
 * is released), coop_pool_create makes a CUDA pool, and coop_pool_destroy
 * checks afterwards that the driver is clean. Requires <cuda.h>, <cmocka.h>,
 * "coop.h" and "cuda_mock.h" included before.
 */
#ifndef COOP_TEST_CUDA_MOCK_STREAMS_H
#define COOP_TEST_CUDA_MOCK_STREAMS_H

#define CUDA_MOCK_STREAMS 8

static CUstream cuda_mock_streams[CUDA_MOCK_STREAMS];

static inline void cuda_mock_streams_create(void)
{
    for (int i = 0; i < CUDA_MOCK_STREAMS; i++)
        cuda_mock_stream(&cuda_mock_streams[i], true);
}

static inline void cuda_mock_streams_destroy(void)
{
    for (int i = 0; i < CUDA_MOCK_STREAMS; i++)
        cuda_mock_stream(&cuda_mock_streams[i], false);
}

static inline coop_stream cuda_mock_handle(coop_stream s)
{
    if (s >= CUDA_MOCK_STREAMS)
        fail_msg("stream %ju: the test uses more than %d streams", (uintmax_t)s, CUDA_MOCK_STREAMS);
    return (coop_stream)(uintptr_t)cuda_mock_streams[s];
}

/* The small integer of a created stream; others (COOP_STREAM_ANY) unchanged. */
static inline coop_stream cuda_mock_index(coop_stream handle)
{
    for (int i = 0; i < CUDA_MOCK_STREAMS; i++)
        if ((coop_stream)(uintptr_t)cuda_mock_streams[i] == handle)
            return (coop_stream)i;
    return handle;
}

typedef struct cuda_mock_walk {
    coop_block_visitor on_block;
    void *ctx;
} cuda_mock_walk;

static inline int cuda_mock_walk_block(const coop_block_info *block, void *ctx)
{
    const cuda_mock_walk *w = ctx;
    coop_block_info b = *block;
    b.stream = cuda_mock_index(b.stream);
    return w->on_block(&b, w->ctx);
}

static inline coop_status cuda_mock_walk_pool(coop_pool *pool, coop_segment_visitor on_segment,
                                              coop_block_visitor on_block, void *ctx)
{
    if (on_segment)
        fail_msg("cuda_mock_streams.h: segment visitors are not translated");
    cuda_mock_walk w = {on_block, ctx};
    return coop_walk(pool, NULL, cuda_mock_walk_block, &w);
}

static inline coop_status cuda_mock_pool_create(const coop_config *config, coop_pool **out)
{
    coop_config c = *config;
    c.backend = COOP_BACKEND_CUDA;
    c.device = 0;
    return coop_pool_create(&c, out);
}

static inline void cuda_mock_pool_destroy(coop_pool *pool)
{
    /* the pool did run on the CUDA backend: it holds the primary context */
    if (pool && cuda_mock_now().retained != 1)
        fail_msg("the pool does not hold the mock driver's primary context");
    coop_pool_destroy(pool);
    cuda_mock_assert_clean("after coop_pool_destroy");
}

static inline coop_status cuda_mock_hold(coop_pool *pool, coop_stream stream, bool hold)
{
    (void)pool;
    if (cuda_mock.hold_stream((CUstream)cuda_mock_handle(stream), hold) != 0)
        return COOP_ERR_INVALID;
    return COOP_OK;
}

#define coop_pool_create(config, out) cuda_mock_pool_create(config, out)
#define coop_pool_destroy(pool) cuda_mock_pool_destroy(pool)
#define coop_host_hold_stream(pool, stream, hold) cuda_mock_hold(pool, stream, hold)
#define coop_malloc(pool, size, stream, flags, status)                                             \
    coop_malloc(pool, size, cuda_mock_handle(stream), flags, status)
#define coop_record_stream(pool, ptr, stream)                                                      \
    coop_record_stream(pool, ptr, cuda_mock_handle(stream))
#define coop_walk(pool, on_segment, on_block, ctx)                                                 \
    cuda_mock_walk_pool(pool, on_segment, on_block, ctx)

#endif
