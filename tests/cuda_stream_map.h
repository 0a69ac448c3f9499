/*
 * Runs a host-backend test program's source on the CUDA backend: include
 * this, then the program's .c file. The program's streams are small integers
 * (0, 1, 2, ...); a driver accepts only streams it created, so each is mapped
 * to a created stream, both ways: coop_malloc and coop_record_stream get the
 * created stream, coop_walk's visitors see the small integer again.
 * coop_pool_create makes a CUDA pool on device 0 that never waits for a
 * stream (coop_config.never_wait), as the programs' held streams stand for
 * streams blocked on the host.
 *
 * The includer provides, before including this file, the driver side:
 *   cuda_map_streams[]: the created streams, CUDA_MAP_STREAMS of them;
 *   cuda_map_hold(stream, hold): holds (or releases) a created stream so that
 *     events recorded on it stay incomplete until it is released, and on
 *     release returns only once they have completed;
 *   cuda_map_after_free(): runs after every coop_free, so that the events the
 *     free recorded on streams that are not held have completed, as the
 *     program's model assumes (the host backend completes them at once);
 *   cuda_map_use(ptr, size, stream): queues work on the stream that uses
 *     [ptr, +size), as a kernel would: after every successful coop_malloc
 *     (the whole block, on its stream) and coop_record_stream (its first 512
 *     bytes, on the recorded stream), so that unmapping a page still in use
 *     shows (the mock reports it; a device faults);
 *   cuda_map_before_create(config): may adjust the configuration of every
 *     coop_pool_create (a device refuses pages below its granularity);
 *   cuda_map_after_create(status): runs after every coop_pool_create;
 *   cuda_map_after_destroy(): runs after every coop_pool_destroy.
 * Requires <cmocka.h> and "coop.h" included before.
 */
#ifndef COOP_TEST_CUDA_STREAM_MAP_H
#define COOP_TEST_CUDA_STREAM_MAP_H

static inline coop_stream cuda_map_handle(coop_stream s)
{
    if (s >= CUDA_MAP_STREAMS)
        fail_msg("stream %ju: the test uses more than %d streams", (uintmax_t)s, CUDA_MAP_STREAMS);
    return cuda_map_streams[s];
}

/* The small integer of a created stream; others (COOP_STREAM_ANY) unchanged. */
static inline coop_stream cuda_map_index(coop_stream handle)
{
    for (int i = 0; i < CUDA_MAP_STREAMS; i++)
        if (cuda_map_streams[i] == handle)
            return (coop_stream)i;
    return handle;
}

typedef struct cuda_map_walk {
    coop_block_visitor on_block;
    void *ctx;
} cuda_map_walk;

static inline int cuda_map_walk_block(const coop_block_info *block, void *ctx)
{
    const cuda_map_walk *w = ctx;
    coop_block_info b = *block;
    b.stream = cuda_map_index(b.stream);
    return w->on_block(&b, w->ctx);
}

static inline coop_status cuda_map_walk_pool(coop_pool *pool, coop_segment_visitor on_segment,
                                             coop_block_visitor on_block, void *ctx)
{
    if (on_segment)
        fail_msg("cuda_stream_map.h: segment visitors are not translated");
    cuda_map_walk w = {on_block, ctx};
    return coop_walk(pool, NULL, cuda_map_walk_block, &w);
}

static inline coop_status cuda_map_pool_create(const coop_config *config, coop_pool **out)
{
    coop_config c = *config;
    c.backend = COOP_BACKEND_CUDA;
    c.device = 0;
    /* The programs' holds are the host backend's: streams blocked on the
     * host, which a wait cannot end. On the mock a wait would end the hold
     * (a kernel finishing), on a device it would never return. */
    c.never_wait = true;
    cuda_map_before_create(&c);
    coop_status st = coop_pool_create(&c, out);
    cuda_map_after_create(st);
    return st;
}

static inline void cuda_map_pool_destroy(coop_pool *pool)
{
    coop_pool_destroy(pool);
    cuda_map_after_destroy();
}

static inline coop_status cuda_map_free(coop_pool *pool, void *ptr)
{
    coop_status st = coop_free(pool, ptr);
    cuda_map_after_free();
    return st;
}

static inline coop_status cuda_map_hold_stream(coop_pool *pool, coop_stream stream, bool hold)
{
    (void)pool;
    return cuda_map_hold(cuda_map_handle(stream), hold);
}

static inline void *cuda_map_malloc(coop_pool *pool, size_t size, coop_stream stream,
                                    unsigned flags, coop_status *status)
{
    coop_stream handle = cuda_map_handle(stream);
    void *p = coop_malloc(pool, size, handle, flags, status);
    if (p && size)
        cuda_map_use(p, size, handle);
    return p;
}

static inline coop_status cuda_map_record_stream(coop_pool *pool, void *ptr, coop_stream stream)
{
    coop_stream handle = cuda_map_handle(stream);
    coop_status st = coop_record_stream(pool, ptr, handle);
    if (st == COOP_OK)
        cuda_map_use(ptr, 512, handle);
    return st;
}

#define coop_pool_create(config, out) cuda_map_pool_create(config, out)
#define coop_pool_destroy(pool) cuda_map_pool_destroy(pool)
#define coop_free(pool, ptr) cuda_map_free(pool, ptr)
#define coop_host_hold_stream(pool, stream, hold) cuda_map_hold_stream(pool, stream, hold)
#define coop_malloc(pool, size, stream, flags, status)                                             \
    cuda_map_malloc(pool, size, stream, flags, status)
#define coop_record_stream(pool, ptr, stream) cuda_map_record_stream(pool, ptr, stream)
#define coop_walk(pool, on_segment, on_block, ctx)                                                 \
    cuda_map_walk_pool(pool, on_segment, on_block, ctx)

#endif
