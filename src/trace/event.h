/*
 * One stream of allocation events, produced by every trace reader (pytorch
 * snapshot pickles, coop text traces, minimalloc CSV, DTR op logs) and
 * consumed by replay, convert and sim. Readers load a whole trace into
 * memory: replay runs it many times (capacity bisection).
 */
#ifndef COOP_TRACE_EVENT_H
#define COOP_TRACE_EVENT_H

#include <stddef.h>
#include <stdint.h>

typedef enum trace_event_kind {
    TRACE_ALLOC = 0,      /* id becomes live: size bytes requested on stream */
    TRACE_FREE_REQUESTED, /* owner released id (reuse not yet stream-safe) */
    TRACE_FREE,           /* id's memory reusable (free_completed) */
    TRACE_SEGMENT_ALLOC,  /* recorded allocator reserved [addr, addr+size) */
    TRACE_SEGMENT_FREE,   /* recorded allocator released [addr, addr+size) */
    TRACE_SEGMENT_MAP,    /* expandable segments: pages mapped */
    TRACE_SEGMENT_UNMAP,
    TRACE_OOM /* the recorded run hit out-of-memory */
} trace_event_kind;

/* Allocation ids are dense, 0 .. trace.num_ids-1, so replay can index arrays. */
typedef struct trace_event {
    trace_event_kind kind;
    uint32_t id;
    uint64_t size; /* requested bytes (segments: segment bytes) */
    uint64_t addr; /* recorded address, 0 if unknown */
    uint64_t stream;
    int64_t time_us;  /* recorded time, -1 if unknown */
    uint64_t cost_ns; /* optional producer cost (remat), 0 if unknown */
} trace_event;

/* Sizes a trace may carry are below this (2^56 bytes), the pool's own limit
 * (coop_pool_create refuses capacities at or beyond it). Every reader refuses
 * larger ones with their position, so that rounding a size (to 512 bytes or
 * 2 MiB) or adding a few never wraps around 2^64. TRACE_OOM is exempt: a
 * request that failed may have been of any size, and nothing places it. */
#define TRACE_SIZE_LIMIT ((uint64_t)1 << 56)

/* PyTorch allocator settings that change where blocks go and what is
 * reserved (trace.torch_settings): replay's torch policy emulates PyTorch's
 * defaults only (unlimited max_split_size, no power-of-two rounding
 * divisions, no garbage collection threshold, no expandable segments, no
 * per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF). */
enum {
    TRACE_TORCH_EXPANDABLE_SEGMENTS = 1u << 0,
    TRACE_TORCH_MAX_SPLIT_SIZE = 1u << 1,
    TRACE_TORCH_ROUNDUP_POWER2_DIVISIONS = 1u << 2,
    TRACE_TORCH_GC_THRESHOLD = 1u << 3,
    TRACE_TORCH_MEMORY_FRACTION = 1u << 4,
};

typedef struct trace_segment {
    uint64_t addr, size, stream;
} trace_segment;

typedef struct trace {
    char *name; /* file name without directories */
    /* text traces only: the NAME of the '# from NAME' line after the
     * header, the trace this one was converted from (the recording); the
     * writer names it rather than name, so a converted trace converted again
     * still names the recording. NULL: name is the source. */
    char *source;
    trace_event *events;
    size_t num_events;
    uint32_t num_ids;
    /* ids live before recording began (pickle: freed without alloc, or
     * allocated in the final segments without an alloc event); replay
     * allocates them first, in this order. Readers put their TRACE_ALLOC
     * events (size, stream, addr) first in events[], in this same order:
     * events[i].id == live_at_start[i] for i < num_live_at_start, so
     * replaying events[] from the start allocates them first. */
    uint32_t *live_at_start;
    size_t num_live_at_start;
    /* snapshots only: the recorded allocator's final segments */
    trace_segment *final_segments;
    size_t num_final_segments;
    int has_segment_events;
    /* Where each segment event (TRACE_SEGMENT_*) came from, in event order:
     * its line (text traces) or byte offset (snapshots, segment_where_is_byte),
     * for messages about segment events that do not add up; NULL when the
     * reader (or whoever built the trace) kept none. */
    uint64_t *segment_where;
    size_t num_segment_where;
    int segment_where_is_byte;
    /* snapshots only: whether the snapshot recorded its allocator_settings,
     * and which of them (TRACE_TORCH_* bits) are not PyTorch's defaults */
    int has_torch_settings;
    unsigned torch_settings;
    /* snapshots only: written by coop (allocator_settings' "allocator" is
     * "coop"), so its segments and `recorded` figures are coop's, and it has
     * no PyTorch settings (has_torch_settings 0) */
    int recorded_by_coop;
    /* snapshots only: the device_traces index read, how many devices the
     * snapshot lists, and how many of them have events (coop convert says
     * which it read, and that others were left out) */
    size_t snapshot_device, snapshot_num_devices, snapshot_devices_with_events;
} trace;

#endif
