/*
 * Host backend: a simulated device inside this process's address space.
 *
 * Reservations and segments are mmap(PROT_NONE, MAP_NORESERVE) ranges that
 * are never touched, so an 80 GiB "device" costs no memory and any CPU access
 * to device memory faults. Mapping and unmapping pages is bookkeeping: the
 * backend counts mapped bytes against the simulated device size and refuses
 * (COOP_ERR_NOMEM) beyond it, like a GPU that is full.
 *
 * Streams and events are simulated: an event recorded on a stream is complete
 * at once unless the stream is held (coop_host_hold_stream); releasing the
 * hold completes every event recorded during it. Each hold has a generation
 * number, so an event belongs to exactly one hold. A busy hold (queued
 * kernels still running) also ends when one of its events is waited for; a
 * plain hold stands for a stream blocked on the host, which no wait of this
 * thread could end: waiting for it fails rather than never returning.
 *
 * Segments (pools without VMM) are carved from one reservation of twice the
 * device size, from the top of the highest free range that fits, so the same
 * calls give the same addresses in every run: mmap's own choices move with
 * ASLR and with whatever else the process maps, and an address-ordered pool
 * decides by address (with mmap, random_model_test's segment pools ended one
 * seed with other retry counts from run to run). Top-down is where Linux's
 * mmap puts mappings, so replays keep the figures measured with mmap'ed
 * segments. A segment that finds no room there (the space fragmented) falls
 * back to its own mmap.
 *
 * Simulated pages may be smaller than the OS's (any power of two >= 512:
 * replay and the rematerialization model use 512-byte pages): ranges are
 * then reserved on OS-page boundaries and rounded up to whole OS pages, and
 * mapping stays bookkeeping in simulated pages.
 *
 * Not thread-safe: the pool calls its backend under the pool lock.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "status.h"

typedef struct host_stream {
    coop_stream stream;
    bool held;
    bool busy;                /* the hold ends when waited for */
    uint64_t hold_generation; /* of the current or last hold; starts at 0 */
    size_t events;            /* live events recorded on it (they name the slot) */
    /* the pool forgot the stream (host_forget_stream): the slot is vacated,
     * for a new stream to reuse, once its last event is destroyed */
    bool forgotten;
    bool vacant; /* free for a new stream */
} host_stream;

/* generation 0: complete when recorded (the stream was not held). */
typedef struct host_event {
    size_t stream_slot;
    uint64_t generation;
} host_event;

/* A free range of the segment space. */
typedef struct seg_hole {
    uintptr_t start;
    uint64_t size;
} seg_hole;

typedef struct host_backend {
    coop_backend base;
    uint64_t mapped; /* bytes mapped or in segments */
    size_t ranges;   /* live reservations and segments */
    /* Segment space: [space, space + space_size), reserved at the first
     * segment; its free ranges in address order, never two adjacent. */
    uintptr_t space;
    uint64_t space_size;
    seg_hole *holes;
    size_t num_holes, cap_holes;
    size_t space_segments; /* live segments carved from the space */
    bool space_tried;      /* open_segment_space ran (space 0: refused) */
    host_stream *streams;
    size_t num_streams, cap_streams;
    size_t live_events;
} host_backend;

static host_backend *host_of(coop_backend *be)
{
    return (host_backend *)be;
}

/* ---- Address space ---- */

static uint64_t os_page(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (uint64_t)ps : 4096;
}

/* size rounded up to whole OS pages: what munmap releases for a range. */
static uint64_t os_length(uint64_t size)
{
    uint64_t ps = os_page();
    return (size + ps - 1) & ~(ps - 1);
}

/* An mmap'ed PROT_NONE range of size bytes aligned to align (a power of two;
 * at least the OS page), its length rounded up to whole OS pages. */
static coop_status reserve_aligned(uint64_t size, uint64_t align, uintptr_t *addr)
{
    if (align < os_page())
        align = os_page();
    if (size == 0 || size > UINT64_MAX - 2 * align)
        return coop_set_error(COOP_ERR_INVALID, "host backend: bad reservation size %llu",
                              (unsigned long long)size);
    size = os_length(size);
    size_t len = (size_t)(size + align);
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return coop_set_error(COOP_ERR_NOMEM,
                              "host backend: cannot reserve %llu bytes of address space",
                              (unsigned long long)size);
    uintptr_t start = (uintptr_t)p;
    uintptr_t aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
    if (aligned > start)
        munmap(p, aligned - start);
    uintptr_t end = start + len, aligned_end = aligned + size;
    if (end > aligned_end)
        munmap((void *)aligned_end, end - aligned_end);
    *addr = aligned;
    return COOP_OK;
}

static coop_status host_reserve(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    coop_status st = reserve_aligned(size, be->page_size, addr);
    if (st == COOP_OK)
        host_of(be)->ranges++;
    return st;
}

static coop_status host_release(coop_backend *be, uintptr_t addr, uint64_t size)
{
    if (munmap((void *)addr, os_length(size)) != 0)
        return coop_set_error(COOP_ERR_BACKEND, "host backend: munmap(%#lx, %llu) failed",
                              (unsigned long)addr, (unsigned long long)size);
    host_of(be)->ranges--;
    return COOP_OK;
}

static coop_status check_page_range(coop_backend *be, uintptr_t addr, uint64_t size)
{
    if (size == 0 || addr % be->page_size || size % be->page_size)
        return coop_set_error(
            COOP_ERR_INVALID,
            "host backend: [%#lx, +%llu) is not a whole number of %llu-byte pages",
            (unsigned long)addr, (unsigned long long)size, (unsigned long long)be->page_size);
    return COOP_OK;
}

/* COOP_OK when size more bytes fit in the simulated device, whose bytes in
 * use (h->mapped) are pages mapped or segments (how: "mapped", "in
 * segments", for the message). */
static coop_status check_device_room(coop_backend *be, uint64_t size, const char *how)
{
    host_backend *h = host_of(be);
    if (size > be->device_memory - h->mapped)
        return coop_set_error(COOP_ERR_NOMEM,
                              "host backend: simulated device full (%llu of %llu bytes %s, "
                              "%llu more asked)",
                              (unsigned long long)h->mapped, (unsigned long long)be->device_memory,
                              how, (unsigned long long)size);
    return COOP_OK;
}

static coop_status host_map(coop_backend *be, uintptr_t addr, uint64_t size)
{
    coop_status st = check_page_range(be, addr, size);
    if (st == COOP_OK)
        st = check_device_room(be, size, "mapped");
    if (st != COOP_OK)
        return st;
    host_of(be)->mapped += size;
    return COOP_OK;
}

static coop_status host_unmap(coop_backend *be, uintptr_t addr, uint64_t size, uint64_t *unmapped)
{
    host_backend *h = host_of(be);
    *unmapped = 0;
    coop_status st = check_page_range(be, addr, size);
    if (st != COOP_OK)
        return st;
    if (size > h->mapped)
        return coop_set_error(COOP_ERR_INVALID, "host backend: unmapping more than is mapped");
    h->mapped -= size;
    *unmapped = size;
    return COOP_OK;
}

/* ---- Segments ---- */

/* Segments are carved in whole granules: simulated pages, at least the OS's
 * (as a segment of its own mmap is aligned and rounded). */
static uint64_t segment_granule(const coop_backend *be)
{
    uint64_t ps = os_page();
    return be->page_size > ps ? be->page_size : ps;
}

/* The bytes a segment of size takes in the space: whole granules. */
static coop_status carved_length(const coop_backend *be, uint64_t size, uint64_t *len)
{
    uint64_t g = segment_granule(be);
    if (size == 0 || size > UINT64_MAX - g)
        return coop_set_error(COOP_ERR_INVALID, "host backend: bad segment size %llu",
                              (unsigned long long)size);
    *len = (size + g - 1) / g * g;
    return COOP_OK;
}

/* Reserves the segment space, tried once; leaves none (segments then get their own
 * mmap) when the address space or the host's memory refuses it. */
static void open_segment_space(coop_backend *be)
{
    host_backend *h = host_of(be);
    h->space_tried = true;
    uint64_t g = segment_granule(be);
    if (be->device_memory > (UINT64_MAX - g) / 4)
        return;
    uint64_t size = (2 * be->device_memory + g - 1) / g * g;
    if (reserve_aligned(size, g, &h->space) != COOP_OK) {
        coop_clear_error();
        h->space = 0;
        return;
    }
    h->holes = malloc(4 * sizeof *h->holes);
    if (!h->holes) {
        munmap((void *)h->space, os_length(size));
        h->space = 0;
        return;
    }
    h->cap_holes = 4;
    h->holes[0] = (seg_hole){h->space, size};
    h->num_holes = 1;
    h->space_size = size;
}

/* The top of the highest free range of the space holding size bytes, or 0
 * (a linear pass: segments are few, and made rarely). A free never
 * needs more holes than live segments + 1, so room for that many is made
 * here, where failing is allowed, and never in host_segment_free. */
static uintptr_t carve_segment(host_backend *h, uint64_t size)
{
    if (h->space_segments + 2 > h->cap_holes) {
        size_t cap = 2 * h->cap_holes;
        seg_hole *grown = realloc(h->holes, cap * sizeof *grown);
        if (!grown)
            return 0;
        h->holes = grown;
        h->cap_holes = cap;
    }
    for (size_t i = h->num_holes; i-- > 0;) {
        seg_hole *hole = &h->holes[i];
        if (hole->size < size)
            continue;
        hole->size -= size;
        uintptr_t addr = hole->start + hole->size;
        if (hole->size == 0) {
            memmove(hole, hole + 1, (h->num_holes - i - 1) * sizeof *hole);
            h->num_holes--;
        }
        h->space_segments++;
        return addr;
    }
    return 0;
}

/* Gives [addr, addr + size) back to the space, merging with its neighbours. */
static coop_status return_segment(host_backend *h, uintptr_t addr, uint64_t size)
{
    size_t i = 0; /* first hole above addr */
    while (i < h->num_holes && h->holes[i].start < addr)
        i++;
    bool overlaps_prev = i > 0 && h->holes[i - 1].start + h->holes[i - 1].size > addr;
    bool overlaps_next = i < h->num_holes && addr + size > h->holes[i].start;
    if (overlaps_prev || overlaps_next || addr + size > h->space + h->space_size)
        return coop_set_error(COOP_ERR_INVALID,
                              "host backend: segment [%#lx, +%llu) is not a live segment",
                              (unsigned long)addr, (unsigned long long)size);
    bool join_prev = i > 0 && h->holes[i - 1].start + h->holes[i - 1].size == addr;
    bool join_next = i < h->num_holes && addr + size == h->holes[i].start;
    if (join_prev && join_next) {
        h->holes[i - 1].size += size + h->holes[i].size;
        memmove(&h->holes[i], &h->holes[i + 1], (h->num_holes - i - 1) * sizeof *h->holes);
        h->num_holes--;
    } else if (join_prev) {
        h->holes[i - 1].size += size;
    } else if (join_next) {
        h->holes[i].start = addr;
        h->holes[i].size += size;
    } else {
        memmove(&h->holes[i + 1], &h->holes[i], (h->num_holes - i) * sizeof *h->holes);
        h->holes[i] = (seg_hole){addr, size};
        h->num_holes++;
    }
    h->space_segments--;
    return COOP_OK;
}

static coop_status host_segment_alloc(coop_backend *be, uint64_t size, uintptr_t *addr)
{
    host_backend *h = host_of(be);
    coop_status st = check_device_room(be, size, "in segments");
    if (st != COOP_OK)
        return st;
    uint64_t len;
    if ((st = carved_length(be, size, &len)) != COOP_OK)
        return st;
    if (!h->space_tried)
        open_segment_space(be);
    uintptr_t carved = h->space ? carve_segment(h, len) : 0;
    if (carved)
        *addr = carved;
    else if ((st = reserve_aligned(size, be->page_size, addr)) != COOP_OK)
        return st;
    h->mapped += size;
    h->ranges++;
    return COOP_OK;
}

static coop_status host_segment_free(coop_backend *be, uintptr_t addr, uint64_t size)
{
    host_backend *h = host_of(be);
    coop_status st;
    if (h->space && addr >= h->space && addr - h->space < h->space_size) {
        uint64_t len;
        if ((st = carved_length(be, size, &len)) == COOP_OK)
            st = return_segment(h, addr, len);
        if (st == COOP_OK)
            h->ranges--;
    } else {
        st = host_release(be, addr, size);
    }
    if (st == COOP_OK)
        h->mapped -= size;
    return st;
}

/* ---- Streams and events ---- */

/* The slot of stream, or NULL. */
static host_stream *find_stream(host_backend *h, coop_stream stream, size_t *slot)
{
    for (size_t i = 0; i < h->num_streams; i++)
        if (!h->streams[i].vacant && h->streams[i].stream == stream) {
            *slot = i;
            return &h->streams[i];
        }
    return NULL;
}

/* The slot of stream, made if needed (a vacant one reused first, so the
 * table holds as many slots as streams were ever in use at once, not as
 * streams were ever seen); NULL out of host memory. A stream used again
 * after it was forgotten is simply in use again. */
static host_stream *stream_slot(host_backend *h, coop_stream stream, size_t *slot)
{
    host_stream *known = find_stream(h, stream, slot);
    if (known) {
        known->forgotten = false;
        return known;
    }
    for (size_t i = 0; i < h->num_streams; i++)
        if (h->streams[i].vacant) {
            *slot = i;
            h->streams[i] = (host_stream){.stream = stream};
            return &h->streams[i];
        }
    if (h->num_streams == h->cap_streams) {
        size_t cap = h->cap_streams ? 2 * h->cap_streams : 8;
        host_stream *s = realloc(h->streams, cap * sizeof *s);
        if (!s)
            return NULL;
        h->streams = s;
        h->cap_streams = cap;
    }
    *slot = h->num_streams;
    h->streams[h->num_streams] = (host_stream){.stream = stream};
    return &h->streams[h->num_streams++];
}

static coop_status host_event_record(coop_backend *be, coop_stream stream, coop_event *ev)
{
    host_backend *h = host_of(be);
    size_t slot;
    host_stream *s = stream_slot(h, stream, &slot);
    host_event *e = s ? malloc(sizeof *e) : NULL;
    if (!e)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "host backend: no memory for an event");
    e->stream_slot = slot;
    e->generation = s->held ? s->hold_generation : 0;
    s->events++;
    h->live_events++;
    *ev = (coop_event)e;
    return COOP_OK;
}

static coop_status host_event_query(coop_backend *be, coop_event ev, bool *done)
{
    host_backend *h = host_of(be);
    const host_event *e = (const host_event *)ev;
    const host_stream *s = &h->streams[e->stream_slot];
    *done = e->generation == 0 || !s->held || s->hold_generation != e->generation;
    return COOP_OK;
}

static coop_status host_event_wait(coop_backend *be, coop_event ev)
{
    host_backend *h = host_of(be);
    const host_event *e = (const host_event *)ev;
    host_stream *s = &h->streams[e->stream_slot];
    bool done;
    host_event_query(be, ev, &done);
    if (done)
        return COOP_OK;
    if (!s->busy)
        return coop_set_error(COOP_ERR_BACKEND,
                              "host backend: stream %#lx is held (blocked on the host): waiting "
                              "for it would never end",
                              (unsigned long)s->stream);
    s->held = s->busy = false; /* its work has finished */
    return COOP_OK;
}

/* The device finishes everything: busy holds end; a stream held on the host
 * would never finish, so that is refused, as host_event_wait refuses it. */
static coop_status host_synchronize(coop_backend *be)
{
    host_backend *h = host_of(be);
    for (size_t i = 0; i < h->num_streams; i++)
        if (h->streams[i].held && !h->streams[i].busy)
            return coop_set_error(COOP_ERR_BACKEND,
                                  "host backend: stream %#lx is held (blocked on the host): "
                                  "synchronizing the device would never end",
                                  (unsigned long)h->streams[i].stream);
    for (size_t i = 0; i < h->num_streams; i++)
        h->streams[i].held = h->streams[i].busy = false;
    return COOP_OK;
}

/* A forgotten stream's slot becomes vacant with its last event. */
static void vacate_if_done(host_stream *s)
{
    if (s->forgotten && !s->events && !s->held)
        *s = (host_stream){.vacant = true};
}

static void host_event_destroy(coop_backend *be, coop_event ev)
{
    host_backend *h = host_of(be);
    host_event *e = (host_event *)ev;
    host_stream *s = &h->streams[e->stream_slot];
    s->events--;
    vacate_if_done(s);
    free(e);
    h->live_events--;
}

/* The pool will not name the stream again (coop_forget_stream): its slot
 * goes once no event recorded on it is live. A held stream keeps it (the
 * pool forgets none: it refuses while the stream's work is unfinished). */
static void host_forget_stream(coop_backend *be, coop_stream stream)
{
    size_t slot;
    host_stream *s = find_stream(host_of(be), stream, &slot);
    if (!s)
        return;
    s->forgotten = true;
    vacate_if_done(s);
}

static coop_status host_hold_stream(coop_backend *be, coop_stream stream, bool hold, bool busy)
{
    host_backend *h = host_of(be);
    size_t slot;
    host_stream *s = stream_slot(h, stream, &slot);
    if (!s)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "host backend: no memory for a stream");
    if (hold && !s->held)
        s->hold_generation++;
    s->held = hold;
    s->busy = hold && busy;
    return COOP_OK;
}

static void host_destroy(coop_backend *be)
{
    host_backend *h = host_of(be);
    if (h->space)
        munmap((void *)h->space, os_length(h->space_size));
    free(h->holes);
    free(h->streams);
    free(h);
}

static const coop_backend_ops host_ops = {
    .reserve = host_reserve,
    .release = host_release,
    .map = host_map,
    .unmap = host_unmap,
    .synchronize = host_synchronize,
    .segment_alloc = host_segment_alloc,
    .segment_free = host_segment_free,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_wait = host_event_wait,
    .event_destroy = host_event_destroy,
    .hold_stream = host_hold_stream,
    .forget_stream = host_forget_stream,
    .destroy = host_destroy,
};

coop_status coop_backend_host_create(uint64_t device_memory, uint64_t page_size, bool vmm,
                                     coop_backend **out)
{
    *out = NULL;
    if (page_size < 512 || (page_size & (page_size - 1)))
        return coop_set_error(COOP_ERR_INVALID,
                              "host backend: page size %llu is not a power of two >= 512",
                              (unsigned long long)page_size);
    if (device_memory == 0 || device_memory % page_size)
        return coop_set_error(COOP_ERR_INVALID,
                              "host backend: device size %llu is not a positive multiple of the "
                              "page size %llu",
                              (unsigned long long)device_memory, (unsigned long long)page_size);
    host_backend *h = calloc(1, sizeof *h);
    if (!h)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "host backend: out of host memory");
    h->base.ops = &host_ops;
    h->base.name = "host";
    h->base.has_vmm = vmm;
    h->base.page_size = page_size;
    h->base.device_memory = device_memory;
    *out = &h->base;
    return COOP_OK;
}

bool coop_backend_is_host(const coop_backend *be)
{
    return be->ops == &host_ops;
}

uint64_t coop_backend_host_mapped(const coop_backend *be)
{
    return ((const host_backend *)be)->mapped;
}

size_t coop_backend_host_live_ranges(const coop_backend *be)
{
    return ((const host_backend *)be)->ranges;
}

size_t coop_backend_host_live_events(const coop_backend *be)
{
    return ((const host_backend *)be)->live_events;
}

size_t coop_backend_host_streams(const coop_backend *be)
{
    const host_backend *h = (const host_backend *)be;
    size_t n = 0;
    for (size_t i = 0; i < h->num_streams; i++)
        n += !h->streams[i].vacant;
    return n;
}
