/*
 * COOP_ALLOC_CONF: the PyTorch integration's configuration string, with the
 * syntax of PYTORCH_CUDA_ALLOC_CONF: "key:value,key:value". Keys:
 *
 *   backend:cuda|host       device kind (default cuda; host = simulated device)
 *   capacity:BYTES          most bytes mapped per device (K/M/G/T suffixes, binary,
 *                           optional "i"/"iB"/"B", any case: 40G, 512MiB, 1ti,
 *                           40gb); the pool rounds it up to whole pages
 *   fraction:F              capacity as a fraction (0, 1] of the device's memory
 *                           (exclusive with capacity)
 *   page:BYTES              physical mapping granularity (power of two >= 512)
 *   vmm:true|false          map pages on demand (default true) or use fixed segments
 *   segment:BYTES           segment size without VMM
 *   placement:low|high      where in a free block allocations go (default low)
 *   min_split:BYTES         smallest remainder a split may leave (multiple of 512; at
 *                           most the page size, or the segment size without VMM:
 *                           checked when the pool is created)
 *   check:true|false        validate every invariant after every operation (slow)
 *   history:true|false|N    record alloc/free events for snapshots' device_traces,
 *                           keeping the last N (true = 100000)
 *   wait:true|false         wait for busy streams when memory runs out and on
 *                           empty_cache (default true, as PyTorch); false where a
 *                           stream can be blocked on the host (coop_config.never_wait)
 *
 * Byte values (capacity, page, segment, min_split) must be below 2^56, as
 * coop_pool_create's; "default" for one of them is the key left out (the
 * spelling coop_torch_settings writes, so that its text parses back).
 * Whitespace around keys and values is ignored; empty items (",,") are
 * skipped.
 * One configuration serves every device (no per-device keys, as in
 * PYTORCH_CUDA_ALLOC_CONF): capacity and fraction are each pool's own limit.
 */
#ifndef COOP_TORCH_ALLOC_CONF_H
#define COOP_TORCH_ALLOC_CONF_H

#include "coop.h"

#define COOP_ALLOC_CONF_DEFAULT_HISTORY 100000u

typedef struct coop_alloc_conf {
    coop_backend_kind backend;
    uint64_t capacity;  /* 0 = not set */
    double fraction;    /* 0 = not set */
    uint64_t page_size; /* 0 = backend's */
    bool use_vmm;
    uint64_t segment_size; /* 0 = pool's default */
    unsigned placement;    /* COOP_ALLOC_LOW or COOP_ALLOC_HIGH */
    uint64_t min_split;    /* 0 = pool's default */
    bool check;
    size_t history;  /* events kept per device; 0 = off */
    bool never_wait; /* "wait:false" */
} coop_alloc_conf;

/* Defaults: cuda backend, VMM, low placement, no checks, no history. */
void coop_alloc_conf_default(coop_alloc_conf *conf);

/* Parses text (NULL or "" = defaults) into *conf. On a bad key or value it
 * returns COOP_ERR_INVALID, sets a message naming the key, the value and
 * its byte offset, and leaves *conf untouched. */
coop_status coop_alloc_conf_parse(const char *text, coop_alloc_conf *conf);

/* Fills a pool configuration for device from conf (capacity, page, VMM,
 * segment size, min split, checks, waiting); fraction is applied after creation. */
void coop_alloc_conf_to_config(const coop_alloc_conf *conf, int device, coop_config *config);

#endif
