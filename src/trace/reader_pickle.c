/*
 * PyTorch memory snapshots (torch.cuda.memory._dump_snapshot()) as traces.
 *
 * The history is a ring buffer, so it may begin in the middle of the run:
 * a block freed without a recorded alloc, or allocated in the final
 * `segments` without one, was live before recording began. Such blocks
 * become live-at-start allocations, ordered by address; a listed one over
 * bytes the trace's blocks held was allocated after the trace instead
 * (place_unallocated).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "trace/builder.h"
#include "trace/id_map.h"
#include "trace/input.h"
#include "trace/live_ranges.h"
#include "trace/pickle.h"
#include "trace/segment_overlap.h"
#include "trace/torch_settings.h"
#include "trace/trace.h"

/* A live block's state in snapshot_reader.blocks: allocated by the trace,
 * then free_requested; or first seen by its free_requested (adopted), live
 * from before recording began until its free_completed. */
enum { BLOCK_ALLOCATED = 1, BLOCK_FREE_REQUESTED = 2, BLOCK_ADOPTED_REQUESTED = 3 };

/* Most keys an entry, segment or block dict may have. PyTorch writes at most
 * 12 (a segment); each key lookup scans the dict, and a memo reference can
 * repeat one dict at every entry for 2 bytes, so without a bound a small
 * file costs entries x keys comparisons. */
#define SNAPSHOT_MAX_KEYS 64

/* A block freed (requested or completed) without an alloc before it: live
 * from before recording began until that free (adopt_block), so no block the
 * trace allocates before the free may overlap it, nor may another such block
 * (check_adopted). A real snapshot has few, those live when recording began;
 * the trace's own blocks, however many, keep nothing once freed. */
typedef struct adopted_block {
    uint64_t addr, last; /* its bytes: [addr, last] (a block of size 0: one) */
    size_t event;        /* its free's index in the builder's events */
} adopted_block;

/* The initial capacity (items) of snapshot_reader.adopted, doubled when full. */
#define ADOPTED_FIRST 64

/* The initial capacity (items) of snapshot_reader.listed, doubled when full. */
#define LISTED_FIRST 64

/* The initial capacity (items) of snapshot_reader.seg_ranges, doubled when full. */
#define SEG_RANGES_FIRST 16

/* A block the final `segments` list as allocated (active_allocated or
 * active_pending_free), for check_listed. */
typedef struct listed_block {
    uint64_t addr, last, size; /* its bytes in the segment: [addr, last], size of them */
    uint64_t requested, stream;
    uint64_t at;     /* its dict's byte offset */
    size_t seg, blk; /* segments[seg].blocks[blk] */
    int adopted;     /* never allocated in the trace: live since before recording */
} listed_block;

/* The place of the entry being read, named as bad's WHERE only when a
 * message needs it: formatting "device_traces[D][I]" for each entry read
 * cost 8% of a snapshot's conversion. */
typedef enum where_kind {
    WHERE_SNAPSHOT, /* the snapshot dict */
    WHERE_DEVICE,   /* device_traces[i] */
    WHERE_ENTRY,    /* device_traces[i][j] */
    WHERE_SEGMENT,  /* segments[i] */
    WHERE_BLOCK,    /* segments[i].blocks[j] */
} where_kind;

typedef struct snapshot_reader {
    const char *path;
    trace_builder b;
    id_map blocks;          /* (addr, stream) -> live block */
    live_ranges live;       /* the bytes of blocks' (check_overlap, check_listed) */
    adopted_block *adopted; /* device_traces' adopted blocks, in order of their frees */
    size_t num_adopted, cap_adopted;
    listed_block *listed; /* the final segments' allocated blocks on the device */
    size_t num_listed, cap_listed;
    trace_segment_seen *seg_ranges; /* the final segments on the device (order: index) */
    size_t num_seg_ranges, cap_seg_ranges;
    where_kind where;                                /* the entry being read: its kind, */
    size_t where_i, where_j;                         /* its indices, */
    size_t where_at;                                 /* its byte offset */
    size_t device, num_devices, devices_with_events; /* trace.snapshot_* */
} snapshot_reader;

/* Makes the entry being read the one of kind at byte offset `byte` (i and j its
 * indices, where kind has them). */
static void set_where(snapshot_reader *r, where_kind kind, size_t i, size_t j, size_t byte)
{
    r->where = kind;
    r->where_i = i;
    r->where_j = j;
    r->where_at = byte;
}

/* An error about the entry being read: "PATH: byte N: WHERE: what". */
static coop_status bad(const snapshot_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static coop_status bad(const snapshot_reader *r, const char *fmt, ...)
{
    char what[512], where[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t i = r->where_i, j = r->where_j;
    switch (r->where) {
    case WHERE_SNAPSHOT:
        snprintf(where, sizeof where, "snapshot");
        break;
    case WHERE_DEVICE:
        snprintf(where, sizeof where, "device_traces[%zu]", i);
        break;
    case WHERE_ENTRY:
        snprintf(where, sizeof where, "device_traces[%zu][%zu]", i, j);
        break;
    case WHERE_SEGMENT:
        snprintf(where, sizeof where, "segments[%zu]", i);
        break;
    case WHERE_BLOCK:
        snprintf(where, sizeof where, "segments[%zu].blocks[%zu]", i, j);
        break;
    }
    return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s: %s", r->path, r->where_at, where,
                          what);
}

/* The four ints of an entry that seal_entry keeps in its node's summary,
 * by index in v.summary; the tag holds the action (ACTION_BITS) then two bits
 * for each (field_state). */
static const char *const summary_keys[] = {"addr", "size", "stream", "time_us"};
enum { NUM_SUMMARY_KEYS = sizeof summary_keys / sizeof summary_keys[0], ACTION_BITS = 4 };
enum field_state { FIELD_ABSENT, FIELD_INT, FIELD_BIG_INT, FIELD_NONE };

/* dict[key] (pkl_dict_get) from a dict whole or sealed by seal_entry, whose
 * ints come back in *copy. */
static const pkl_value *dict_get(const pkl_value *dict, const char *key, pkl_value *copy)
{
    if (!dict->sealed)
        return pkl_dict_get(dict, key);
    for (size_t k = 0; k < NUM_SUMMARY_KEYS; k++) {
        if (strcmp(key, summary_keys[k]) != 0)
            continue;
        unsigned state = dict->tag >> (ACTION_BITS + 2 * k) & 3;
        if (state == FIELD_ABSENT)
            return NULL;
        *copy = (pkl_value){.kind = state == FIELD_NONE ? PKL_NONE : PKL_INT,
                            .big = state == FIELD_BIG_INT,
                            .offset = dict->offset};
        copy->v.u = dict->v.summary[k];
        return copy;
    }
    return NULL; /* seal_entry seals no dict holding another key this file reads */
}

/* Reads dict[key] as an unsigned 64-bit integer; *found says whether it was
 * there (a missing optional key leaves *out alone). negative_ok accepts a
 * negative value as its two's complement (stream handles). */
static coop_status get_u64(const snapshot_reader *r, const pkl_value *dict, const char *key,
                           int required, int negative_ok, uint64_t *out)
{
    pkl_value copy;
    const pkl_value *v = dict_get(dict, key, &copy);
    if (!v)
        return required ? bad(r, "'%s' is missing", key) : COOP_OK;
    if (v->kind != PKL_INT)
        return bad(r, "'%s' has type %s, expected int", key, pkl_type_name(v));
    if (!v->big && v->v.i < 0 && !negative_ok)
        return bad(r, "'%s' is negative", key);
    *out = v->v.u;
    return COOP_OK;
}

/* Checks that v is a dict of at most SNAPSHOT_MAX_KEYS items; what names it
 * ("entry", "segment", "block") in the error. */
static coop_status small_dict(const snapshot_reader *r, const pkl_value *v, const char *what)
{
    if (v->kind != PKL_DICT)
        return bad(r, "%s has type %s, expected dict", what, pkl_type_name(v));
    if (!v->sealed && v->v.seq.len / 2 > SNAPSHOT_MAX_KEYS) /* seal_entry's have fewer */
        return bad(r, "%s has %zu keys (at most %d expected)", what, v->v.seq.len / 2,
                   SNAPSHOT_MAX_KEYS);
    return COOP_OK;
}

/* Refuses a container that the pickle's memo places more than once: walking
 * each place would repeat its work for every 2-byte BINGET (quadratic in the
 * file). PyTorch never shares a segment or a blocks list. */
static coop_status not_shared(const snapshot_reader *r, const pkl_value *v, const char *what)
{
    if (v->shared)
        return bad(r, "%s is repeated by a memo reference (BINGET): a snapshot lists each once",
                   what);
    return COOP_OK;
}

/* get_u64 for a size: below TRACE_SIZE_LIMIT. */
static coop_status get_size(const snapshot_reader *r, const pkl_value *dict, const char *key,
                            int required, uint64_t *out)
{
    coop_status st = get_u64(r, dict, key, required, 0, out);
    if (st == COOP_OK && *out >= TRACE_SIZE_LIMIT)
        return bad(r, "'%s' %llu is too large (sizes must be below 2^56)", key,
                   (unsigned long long)*out);
    return st;
}

static coop_status get_time(const snapshot_reader *r, const pkl_value *dict, int64_t *out)
{
    pkl_value copy;
    const pkl_value *v = dict_get(dict, "time_us", &copy);
    *out = -1;
    if (!v || v->kind == PKL_NONE)
        return COOP_OK;
    if (v->kind != PKL_INT)
        return bad(r, "'%s' has type %s, expected int", "time_us", pkl_type_name(v));
    if (v->big) /* an int, but above INT64_MAX */
        return bad(r, "'%s' %llu is out of range (at most 2^63-1)", "time_us",
                   (unsigned long long)v->v.u);
    *out = v->v.i;
    return COOP_OK;
}

/* The last byte of size bytes at addr (of one byte for size 0), at most
 * 2^64-1. */
static uint64_t last_byte(uint64_t addr, uint64_t size)
{
    if (!size)
        return addr;
    return size - 1 > UINT64_MAX - addr ? UINT64_MAX : addr + (size - 1);
}

/* A block freed (requested or completed), or listed allocated in the final
 * segments, whose alloc came before the recording: it becomes a
 * live-at-start allocation. A nonzero state (BLOCK_ADOPTED_REQUESTED) keeps
 * it in blocks and live until its free_completed; 0 keeps nothing (its free
 * is this entry, or the trace has ended). */
static coop_status adopt_block(snapshot_reader *r, const trace_event *ev, uint8_t state,
                               uint32_t *id)
{
    coop_status st = trace_builder_new_id(&r->b, id);
    if (st != COOP_OK)
        return st;
    trace_event alloc = {.kind = TRACE_ALLOC,
                         .id = *id,
                         .size = ev->size,
                         .addr = ev->addr,
                         .stream = ev->stream,
                         .time_us = -1};
    if ((st = trace_builder_push_live(&r->b, &alloc)) != COOP_OK)
        return st;
    if (state) {
        id_map_slot *s = id_map_insert(&r->blocks, ev->addr, ev->stream);
        if (!s)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
        s->id = *id;
        s->state = state;
        s->size = ev->size;
        s->where = r->where_at;
        /* Live until its free_completed, so no later alloc may overlap it
         * (check_overlap). One that overlaps a live block already is not
         * kept: an alloc before this free overlaps it, or another adopted
         * block does, and check_adopted refuses either. */
        uint64_t last = last_byte(ev->addr, ev->size);
        if (!live_ranges_overlap(&r->live, ev->addr, last) &&
            live_ranges_insert(&r->live, ev->addr, last, ev->stream, *id) != 0)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    }
    return COOP_OK;
}

/* Keeps the block ev frees, adopted at this free, for check_adopted. */
static coop_status keep_adopted(snapshot_reader *r, const trace_event *ev)
{
    if (GROW_ARRAY(r->adopted, r->cap_adopted, r->num_adopted + 1, ADOPTED_FIRST))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: byte %zu: out of memory", r->path,
                              r->where_at);
    r->adopted[r->num_adopted++] = (adopted_block){
        .addr = ev->addr, .last = last_byte(ev->addr, ev->size), .event = r->b.num_events};
    return COOP_OK;
}

/* What became of the live block s since the entry at s->where, for
 * messages ("allocated and not freed", ...). */
static const char *live_state(const id_map_slot *s)
{
    int state = s ? s->state : BLOCK_ALLOCATED;
    return state == BLOCK_ADOPTED_REQUESTED
               ? "free_requested with no alloc before it (live since before recording began) and "
                 "not free_completed"
           : state == BLOCK_FREE_REQUESTED ? "allocated and free_requested but not free_completed"
                                           : "allocated and not freed";
}

/* Refuses the alloc ev if its bytes overlap a block live in the trace (on
 * any stream, free_requested and waiting for its free_completed included):
 * an allocator never hands out bytes still in use. O(log live blocks). */
static coop_status check_overlap(const snapshot_reader *r, const trace_event *ev)
{
    const live_range *o = live_ranges_overlap(&r->live, ev->addr, last_byte(ev->addr, ev->size));
    if (!o)
        return COOP_OK;
    const id_map_slot *s = id_map_find(&r->blocks, o->addr, o->stream);
    unsigned long long o_size = s ? s->size : 0, o_at = s ? s->where : 0;
    return bad(r,
               "alloc of 0x%llx (stream %llu, %llu bytes) overlaps 0x%llx (stream %llu, %llu "
               "bytes), which the entry at byte %llu %s: an allocator does not hand out a live "
               "block's bytes",
               (unsigned long long)ev->addr, (unsigned long long)ev->stream,
               (unsigned long long)ev->size, (unsigned long long)o->addr,
               (unsigned long long)o->stream, o_size, o_at, live_state(s));
}

static coop_status on_alloc(snapshot_reader *r, trace_event *ev)
{
    id_map_slot *s = id_map_find(&r->blocks, ev->addr, ev->stream);
    if (s) {
        return bad(r,
                   "alloc of address 0x%llx, already allocated by the entry at byte %llu "
                   "and not freed",
                   (unsigned long long)ev->addr, (unsigned long long)s->where);
    }
    coop_status st = check_overlap(r, ev);
    if (st != COOP_OK || (st = trace_builder_new_id(&r->b, &ev->id)) != COOP_OK)
        return st;
    if (!(s = id_map_insert(&r->blocks, ev->addr, ev->stream)) ||
        live_ranges_insert(&r->live, ev->addr, last_byte(ev->addr, ev->size), ev->stream, ev->id) !=
            0)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    s->id = ev->id;
    s->state = BLOCK_ALLOCATED;
    s->size = ev->size;
    s->where = r->where_at;
    return trace_builder_push(&r->b, ev);
}

static coop_status on_free(snapshot_reader *r, trace_event *ev)
{
    id_map_slot *s = id_map_find(&r->blocks, ev->addr, ev->stream);
    coop_status st;
    if (ev->kind == TRACE_FREE_REQUESTED) {
        if (s && s->state != BLOCK_ALLOCATED)
            return bad(r, "free_requested twice for one block (without free_completed)");
        if (s) {
            s->state = BLOCK_FREE_REQUESTED;
            ev->id = s->id;
        } else if ((st = adopt_block(r, ev, BLOCK_ADOPTED_REQUESTED, &ev->id)) != COOP_OK ||
                   (st = keep_adopted(r, ev)) != COOP_OK) {
            return st;
        }
    } else {
        if (s) {
            ev->id = s->id;
            live_ranges_remove(&r->live, ev->addr, s->id);
            id_map_remove(&r->blocks, s);
        } else if ((st = adopt_block(r, ev, 0, &ev->id)) != COOP_OK ||
                   (st = keep_adopted(r, ev)) != COOP_OK) {
            return st;
        }
    }
    return trace_builder_push(&r->b, ev);
}

static coop_status read_fields(snapshot_reader *r, const pkl_value *entry, int kind);

static const struct {
    const char *name;
    int kind; /* trace_event_kind, or -1: not an allocation event (skipped) */
} actions[] = {
    {"alloc", TRACE_ALLOC},
    {"free_requested", TRACE_FREE_REQUESTED},
    {"free_completed", TRACE_FREE},
    {"segment_alloc", TRACE_SEGMENT_ALLOC},
    {"segment_free", TRACE_SEGMENT_FREE},
    {"segment_map", TRACE_SEGMENT_MAP},
    {"segment_unmap", TRACE_SEGMENT_UNMAP},
    {"oom", TRACE_OOM},
    {"snapshot", -1},
};

enum { NUM_ACTIONS = sizeof actions / sizeof actions[0] };
_Static_assert(NUM_ACTIONS < 1 << ACTION_BITS, "an action's index and 'another str' fit");
_Static_assert(ACTION_BITS + 2 * NUM_SUMMARY_KEYS <= 16, "a summary's tag fits");

/* The index in actions of the action a str names, NUM_ACTIONS for none: what
 * seal_entry keeps of an entry's action. */
static unsigned action_index(const pkl_value *action)
{
    for (unsigned i = 0; i < NUM_ACTIONS; i++)
        if (pkl_str_eq(action, actions[i].name))
            return i;
    return NUM_ACTIONS;
}

/* The keys the reader and trace_torch_settings_read look up, for seal_entry
 * (its ctx), with their lengths: it runs for every dict put in a list, each
 * stack frame's among them, and pkl_str_eq's strlen would double the read's
 * time. */
typedef struct seal_keys {
    const char *const *keys; /* NULL-terminated */
    size_t lens[40];
} seal_keys;

/* The reader's pkl_seal_fn. It seals a dict that read_entry reads the same
 * from its summary: a str "action", each of summary_keys absent, an int or
 * None, none of the other keys looked up (so that read_segments, should the
 * dict be a segment or block, finds them absent either way), at most
 * SNAPSHOT_MAX_KEYS keys. Any other dict stays whole, read (and refused) as
 * before. Keys are compared as pkl_dict_get does (str keys only, the last
 * one of a repeated key). */
static int seal_entry(void *ctx, const pkl_value *dict, uint64_t summary[4], uint16_t *tag)
{
    const seal_keys *sk = ctx;
    size_t n = dict->v.seq.len;
    if (n / 2 > SNAPSHOT_MAX_KEYS)
        return 0;
    const pkl_value *action = NULL, *values[NUM_SUMMARY_KEYS] = {0};
    for (size_t i = 0; i < n; i += 2)
        if (pkl_str_eq_len(dict->v.seq.items[i], "action", 6))
            action = dict->v.seq.items[i + 1];
    if (!action || action->kind != PKL_STR) /* a stack frame has none */
        return 0;
    for (size_t i = 0; i < n; i += 2) {
        const pkl_value *key = dict->v.seq.items[i];
        if (key->kind != PKL_STR || pkl_str_eq_len(key, "action", 6))
            continue;
        size_t k = 0;
        while (k < NUM_SUMMARY_KEYS && !pkl_str_eq_len(key, summary_keys[k], sk->lens[k]))
            k++;
        if (k < NUM_SUMMARY_KEYS) {
            values[k] = dict->v.seq.items[i + 1];
            continue;
        }
        for (size_t j = 0; sk->keys[j]; j++)
            if (pkl_str_eq_len(key, sk->keys[j], sk->lens[NUM_SUMMARY_KEYS + j]))
                return 0;
    }
    unsigned bits = action_index(action);
    for (size_t k = 0; k < NUM_SUMMARY_KEYS; k++) {
        const pkl_value *v = values[k];
        unsigned state = !v                    ? FIELD_ABSENT
                         : v->kind == PKL_NONE ? FIELD_NONE
                         : v->kind != PKL_INT  ? 4
                         : v->big              ? FIELD_BIG_INT
                                               : FIELD_INT;
        if (state == 4)
            return 0;
        summary[k] = v ? v->v.u : 0;
        bits |= state << (ACTION_BITS + 2 * k);
    }
    *tag = (uint16_t)bits;
    return 1;
}

/* The trace_event_kind an entry's action names, -1 for none (or one that
 * is not an allocation event, which adds no event). */
static int action_kind(const pkl_value *action)
{
    unsigned i = action_index(action);
    return i < NUM_ACTIONS ? actions[i].kind : -1;
}

/* The trace_event_kind of an entry that read_entry accepted, -1 for one
 * that is not an allocation event (which adds no event). */
static int entry_kind(const pkl_value *entry)
{
    if (entry->sealed) {
        unsigned i = entry->tag & ((1u << ACTION_BITS) - 1);
        return i < NUM_ACTIONS ? actions[i].kind : -1;
    }
    return action_kind(pkl_dict_get(entry, "action"));
}

static coop_status read_entry(snapshot_reader *r, const pkl_value *entry)
{
    coop_status st = small_dict(r, entry, "entry");
    if (st != COOP_OK)
        return st;
    int kind;
    if (entry->sealed) {
        kind = entry_kind(entry);
    } else { /* its action looked up once, checked, then named */
        const pkl_value *action = pkl_dict_get(entry, "action");
        if (!action)
            return bad(r, "'%s' is missing", "action");
        if (action->kind != PKL_STR)
            return bad(r, "'%s' has type %s, expected str", "action", pkl_type_name(action));
        kind = action_kind(action);
    }
    /* Newer PyTorch versions may add actions that are not allocations
     * (like "snapshot"): they say nothing about memory use. */
    return kind < 0 ? COOP_OK : read_fields(r, entry, kind);
}

/* The event of an entry whose action is kind (a trace_event_kind). */
static coop_status read_fields(snapshot_reader *r, const pkl_value *entry, int kind)
{
    coop_status st;
    trace_event ev = {.kind = (trace_event_kind)kind, .time_us = -1};
    if ((st = get_u64(r, entry, "addr", kind != TRACE_OOM, 0, &ev.addr)) != COOP_OK ||
        (st = kind == TRACE_OOM /* any size: see TRACE_SIZE_LIMIT */
                  ? get_u64(r, entry, "size", 1, 0, &ev.size)
                  : get_size(r, entry, "size", 1, &ev.size)) != COOP_OK ||
        (st = get_u64(r, entry, "stream", 0, 1, &ev.stream)) != COOP_OK ||
        (st = get_time(r, entry, &ev.time_us)) != COOP_OK)
        return st;
    switch (ev.kind) {
    case TRACE_ALLOC:
        return on_alloc(r, &ev);
    case TRACE_FREE_REQUESTED:
    case TRACE_FREE:
        return on_free(r, &ev);
    case TRACE_OOM:
        /* PyTorch stores the device's free bytes in an oom entry's "addr":
         * not an address, and the event has none (event.h: addr 0). */
        ev.addr = 0;
        return trace_builder_push(&r->b, &ev);
    default:
        return trace_builder_push(&r->b, &ev);
    }
}

/* The index in list (device_traces[D]) of the entry that added the
 * builder's event: every entry adds one but those whose entry_kind is -1.
 * Only for messages: it walks the list. */
static size_t entry_of_event(const pkl_value *list, size_t event)
{
    size_t i = 0;
    for (; i < list->v.seq.len; i++)
        if (entry_kind(list->v.seq.items[i]) >= 0 && event-- == 0)
            break;
    return i;
}

static unsigned long long byte_of_event(const pkl_value *list, size_t event)
{
    size_t i = entry_of_event(list, event);
    return i < list->v.seq.len ? (unsigned long long)list->v.seq.items[i]->offset : 0;
}

/* The error for the free that adopted a, whose block cannot have been live
 * before recording began: it overlaps the block of the builder's event
 * other, an alloc before that free or (other_adopted) another adopted
 * block's free. The message names the entry of the free, then the others'
 * by byte. */
static coop_status adopted_conflict(snapshot_reader *r, const pkl_value *list, size_t device,
                                    const adopted_block *a, size_t other, int other_adopted)
{
    const trace_event *f = &r->b.events[a->event], *o = &r->b.events[other];
    size_t i = entry_of_event(list, a->event);
    set_where(r, WHERE_ENTRY, device, i, i < list->v.seq.len ? list->v.seq.items[i]->offset : 0);
    const char *action = f->kind == TRACE_FREE ? "free_completed" : "free_requested";
    if (other_adopted && o->addr == f->addr && o->stream == f->stream) {
        /* The same block freed twice: if the trace allocated at its
         * address between the frees (and freed that), the second free
         * conflicts with that alloc, which the message names. */
        size_t between = other + 1;
        while (between < a->event &&
               !(r->b.events[between].kind == TRACE_ALLOC && r->b.events[between].addr == f->addr))
            between++;
        if (between < a->event) {
            other = between;
            o = &r->b.events[other];
            other_adopted = 0;
        }
    }
    unsigned long long addr = f->addr, stream = f->stream, size = f->size;
    unsigned long long o_addr = o->addr, o_stream = o->stream, o_size = o->size;
    unsigned long long o_at = byte_of_event(list, other);
    if (other_adopted) {
        /* A trace with no alloc at all adopts every free, and any address
         * reused is then two frees of one block: recorded with
         * _record_memory_history(skip_actions=[..., "alloc"]), most likely */
        size_t allocs = 0;
        while (allocs < r->b.num_events && r->b.events[allocs].kind != TRACE_ALLOC)
            allocs++;
        const char *hint = allocs < r->b.num_events
                               ? ""
                               : "; the trace records no alloc at all (recorded with skip_actions "
                                 "including 'alloc'?): replay needs the allocations";
        if (o->addr == f->addr && o->stream == f->stream)
            return bad(r,
                       "%s of 0x%llx (stream %llu), which the entry at byte %llu already freed, "
                       "with no alloc between them%s",
                       action, addr, stream, o_at, hint);
        return bad(r,
                   "%s of 0x%llx (stream %llu, %llu bytes) with no alloc before it overlaps "
                   "0x%llx (stream %llu, %llu bytes), which the entry at byte %llu freed with no "
                   "alloc before it either: both would be live when recording began%s",
                   action, addr, stream, size, o_addr, o_stream, o_size, o_at, hint);
    }
    /* the alloc's block is freed (free_completed) before the adopting free? */
    size_t freed = other + 1;
    while (freed < a->event &&
           !(r->b.events[freed].kind == TRACE_FREE && r->b.events[freed].id == o->id))
        freed++;
    if (o->addr == f->addr && freed < a->event) {
        unsigned long long freed_at = byte_of_event(list, freed);
        if (o->stream == f->stream)
            return bad(r,
                       "%s of 0x%llx (stream %llu), which the entry at byte %llu allocated and "
                       "the entry at byte %llu already freed",
                       action, addr, stream, o_at, freed_at);
        return bad(r,
                   "%s of 0x%llx (stream %llu), which the entry at byte %llu allocated on stream "
                   "%llu and the entry at byte %llu already freed",
                   action, addr, stream, o_at, o_stream, freed_at);
    }
    if (o->addr == f->addr) /* live there, on another stream (else the free is its) */
        return bad(r,
                   "%s of 0x%llx (stream %llu), but the block at that address, allocated by the "
                   "entry at byte %llu, is on stream %llu",
                   action, addr, stream, o_at, o_stream);
    return bad(r,
               "%s of 0x%llx (stream %llu, %llu bytes) with no alloc before it (so live since "
               "before recording began), but the entry at byte %llu allocated 0x%llx (stream "
               "%llu, %llu bytes) over it before this free",
               action, addr, stream, size, o_at, o_addr, o_stream, o_size);
}

/* qsort's order by address, then by a second key (the order the entries
 * were read): adopted, listed and segment records alike. */
static int by_addr_then(uint64_t addr_a, uint64_t then_a, uint64_t addr_b, uint64_t then_b)
{
    if (addr_a != addr_b)
        return addr_a < addr_b ? -1 : 1;
    return (then_a > then_b) - (then_a < then_b);
}

static int by_addr_then_event(const void *pa, const void *pb)
{
    const adopted_block *a = pa, *b = pb;
    return by_addr_then(a->addr, a->event, b->addr, b->event);
}

/* The adopted blocks of device_traces[device] (list), its events read: each
 * overlaps no other (all were live when recording began) and no block that
 * the trace allocates before its free. Sorted by address they are disjoint,
 * so each alloc finds those it overlaps by two binary searches, and a tree of
 * the latest free over address ranges (top[1] the root, leaves from
 * top[num]) says whether any of them is freed after the alloc: O(events log
 * adopted), and nothing at all for a trace without adopted blocks. */
static coop_status check_adopted(snapshot_reader *r, const pkl_value *list, size_t device)
{
    size_t num = r->num_adopted;
    adopted_block *a = r->adopted;
    if (!num)
        return COOP_OK;
    qsort(a, num, sizeof *a, by_addr_then_event);
    for (size_t k = 0; k + 1 < num; k++)
        if (a[k].last >= a[k + 1].addr) {
            int later = a[k + 1].event > a[k].event;
            return adopted_conflict(r, list, device, &a[k + later], a[k + !later].event, 1);
        }
    size_t *top = malloc(2 * num * sizeof *top);
    if (!top)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    for (size_t k = 0; k < num; k++)
        top[num + k] = a[k].event;
    for (size_t k = num - 1; k > 0; k--)
        top[k] = top[2 * k] > top[2 * k + 1] ? top[2 * k] : top[2 * k + 1];
    const trace_event *events = r->b.events;
    for (size_t i = 0; i < r->b.num_events; i++) {
        if (events[i].kind != TRACE_ALLOC)
            continue;
        uint64_t first = events[i].addr, last = last_byte(first, events[i].size);
        size_t lo = 0, hi = num; /* lo: the first adopted block ending at or after first */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (a[mid].last < first)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t end = lo; /* the first starting after last */
        hi = num;
        while (end < hi) {
            size_t mid = end + (hi - end) / 2;
            if (a[mid].addr <= last)
                end = mid + 1;
            else
                hi = mid;
        }
        size_t latest = 0;
        for (size_t l = lo + num, h = end + num; l < h; l /= 2, h /= 2) {
            if (l & 1 && top[l++] > latest)
                latest = top[l - 1];
            if (h & 1 && top[--h] > latest)
                latest = top[h];
        }
        if (lo < end && latest > i) {
            free(top);
            while (a[lo].event < i) /* one of them is freed after the alloc */
                lo++;
            return adopted_conflict(r, list, device, &a[lo], i, 0);
        }
    }
    free(top);
    return COOP_OK;
}

static int by_listed_addr(const void *pa, const void *pb)
{
    const listed_block *a = pa, *b = pb;
    return by_addr_then(a->addr, a->at, b->addr, b->at);
}

/* Names listed block l as the entry being read. */
static void at_listed(snapshot_reader *r, const listed_block *l)
{
    set_where(r, WHERE_BLOCK, l->seg, l->blk, l->at);
}

/* The first of the n listed blocks l (sorted by address, none overlapping)
 * that ends at or after first, and (*end) the first that starts after last:
 * those in between overlap [first, last]. */
static size_t listed_overlapping(const listed_block *l, size_t n, uint64_t first, uint64_t last,
                                 size_t *end)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l[mid].last < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t e = lo;
    hi = n;
    while (e < hi) {
        size_t mid = e + (hi - e) / 2;
        if (l[mid].addr <= last)
            e = mid + 1;
        else
            hi = mid;
    }
    *end = e;
    return lo;
}

/* The listed blocks the trace never allocated (check_listed has sorted them
 * and refused any over a block live at the trace's end). Each becomes a
 * live-at-start allocation, live through the whole recording, unless its
 * bytes overlap a block the trace held at some point (allocated and freed,
 * or first seen by its free): both cannot have held them at once, so it was
 * allocated after the trace's last entry. PyTorch copies the trace, then the
 * segments under a second hold of the lock, and another thread's alloc in
 * between is one the trace does not hold: it becomes an alloc after the
 * trace's events. Read as live at start, both blocks were counted live
 * together. O((events + blocks) log blocks). */
static coop_status place_unallocated(snapshot_reader *r)
{
    listed_block *l = r->listed;
    size_t m = 0; /* those never allocated, moved to l[0 .. m), in order */
    for (size_t k = 0; k < r->num_listed; k++)
        if (l[k].adopted)
            l[m++] = l[k];
    if (!m)
        return COOP_OK;
    /* after[k] - after[k - 1]: how many of the trace's blocks start
     * overlapping l[k] (a difference array: a trace block over many listed
     * blocks costs two binary searches, not one step each) */
    size_t *after = calloc(m + 1, sizeof *after);
    if (!after)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    size_t end, lo;
    for (size_t i = 0; i < r->b.num_events; i++) {
        const trace_event *e = &r->b.events[i];
        if (e->kind != TRACE_ALLOC)
            continue;
        lo = listed_overlapping(l, m, e->addr, last_byte(e->addr, e->size), &end);
        after[lo] += lo < end;
        after[end] -= lo < end;
    }
    for (size_t k = 0; k < r->num_adopted; k++) {
        lo = listed_overlapping(l, m, r->adopted[k].addr, r->adopted[k].last, &end);
        after[lo] += lo < end;
        after[end] -= lo < end;
    }
    coop_status st = COOP_OK;
    size_t over = 0;
    for (size_t k = 0; k < m && st == COOP_OK; k++) {
        over += after[k];
        trace_event ev = {.kind = TRACE_ALLOC,
                          .size = l[k].requested,
                          .addr = l[k].addr,
                          .stream = l[k].stream,
                          .time_us = -1};
        if (!over)
            st = adopt_block(r, &ev, 0, &ev.id);
        else if ((st = trace_builder_new_id(&r->b, &ev.id)) == COOP_OK)
            st = trace_builder_push(&r->b, &ev);
    }
    free(after);
    return st;
}

/* The final segments' allocated blocks against each other and the trace.
 * PyTorch copies the segments under the device's lock in one go, so two of
 * their blocks never overlap (within one segment read_block's tiling check
 * rules that out already: here, two in overlapping segments). A block they
 * list that the trace never allocated is taken as live through the whole
 * recording, so it cannot overlap a block the trace holds live at its end
 * either (PyTorch copies the trace just before the segments, under a
 * separate hold of the lock: only another thread's allocator calls in
 * between could make that happen, and the trace would not say what they
 * were; one alloc in between, over bytes the trace freed, place_unallocated
 * reads). O(n log n) in the listed blocks, O(log live) each against the
 * trace. */
static coop_status check_listed(snapshot_reader *r)
{
    listed_block *l = r->listed;
    size_t n = r->num_listed;
    if (!n)
        return COOP_OK;
    qsort(l, n, sizeof *l, by_listed_addr);
    for (size_t k = 0; k + 1 < n; k++)
        if (l[k].last >= l[k + 1].addr) {
            at_listed(r, &l[k + 1]);
            return bad(r,
                       "block 0x%llx (%llu bytes) overlaps 0x%llx (%llu bytes), "
                       "segments[%zu].blocks[%zu] at byte %llu: both allocated in the final "
                       "segments, one copy of the allocator's state, whose blocks never overlap",
                       (unsigned long long)l[k + 1].addr, (unsigned long long)l[k + 1].size,
                       (unsigned long long)l[k].addr, (unsigned long long)l[k].size, l[k].seg,
                       l[k].blk, (unsigned long long)l[k].at);
        }
    for (size_t k = 0; k < n; k++) {
        if (!l[k].adopted)
            continue;
        const live_range *o = live_ranges_overlap(&r->live, l[k].addr, l[k].last);
        if (!o)
            continue;
        const id_map_slot *s = id_map_find(&r->blocks, o->addr, o->stream);
        at_listed(r, &l[k]);
        return bad(r,
                   "block 0x%llx (stream %llu, %llu bytes), allocated here and never in the trace "
                   "(so live since before recording began), overlaps 0x%llx (stream %llu, %llu "
                   "bytes), which the entry at byte %llu %s, live at the trace's end but not "
                   "listed here",
                   (unsigned long long)l[k].addr, (unsigned long long)l[k].stream,
                   (unsigned long long)l[k].requested, (unsigned long long)o->addr,
                   (unsigned long long)o->stream, (unsigned long long)(s ? s->size : 0),
                   (unsigned long long)(s ? s->where : 0), live_state(s));
    }
    return place_unallocated(r);
}

/* The final segments against each other (segment_overlap.h). Run after
 * check_listed, whose message about two of their blocks says more. */
static coop_status check_segments(snapshot_reader *r)
{
    const trace_segment_seen *prev,
        *g = trace_segments_overlap(r->seg_ranges, r->num_seg_ranges, &prev);
    if (!g)
        return COOP_OK;
    set_where(r, WHERE_SEGMENT, (size_t)g->order, 0, g->at);
    return bad(r,
               "segment [0x%llx, 0x%llx) overlaps [0x%llx, 0x%llx), segments[%zu] at byte %llu: "
               "two reservations of the device's memory never share a byte",
               (unsigned long long)g->addr, (unsigned long long)(g->addr + g->size),
               (unsigned long long)prev->addr, (unsigned long long)(prev->addr + prev->size),
               (size_t)prev->order, (unsigned long long)prev->at);
}

/* segments[seg].blocks[j] (blk), which starts at *next_addr unless it
 * says (PyTorch 2.0 wrote no block "address"), on the segment's stream
 * unless it says;
 * *next_addr becomes its end. Its bytes must lie in the segment (sg), and
 * it must start at *next_addr (read_segment checks the last one's end). One allocated
 * (active_allocated or active_pending_free) is kept for check_listed, and adopted if the trace did
 * not allocate it. */
static coop_status read_block(snapshot_reader *r, const pkl_value *blk, size_t seg, size_t j,
                              const trace_segment *sg, uint64_t *next_addr)
{
    set_where(r, WHERE_BLOCK, seg, j, blk->offset);
    coop_status st = small_dict(r, blk, "block");
    if (st != COOP_OK)
        return st;
    trace_event ev = {.kind = TRACE_ALLOC, .addr = *next_addr, .stream = sg->stream, .time_us = -1};
    /* a block's own "stream" (coop.torch's snapshots: one of coop's
     * segments, a run of mapped pages, holds blocks of any stream), else
     * its segment's, as PyTorch's blocks have */
    if ((st = get_u64(r, blk, "address", 0, 0, &ev.addr)) != COOP_OK ||
        (st = get_size(r, blk, "size", 1, &ev.size)) != COOP_OK ||
        (st = get_u64(r, blk, "stream", 0, 1, &ev.stream)) != COOP_OK)
        return st;
    uint64_t size = ev.size; /* the block's; ev.size becomes the request */
    /* PyTorch's blocks tile their segment: one with a byte outside it is
     * not a copy of the allocator's state (sg ends below 2^64, so the sums
     * below do not wrap) */
    if (ev.addr < sg->addr || ev.addr - sg->addr > sg->size ||
        size > sg->size - (ev.addr - sg->addr))
        return bad(r, "block 0x%llx (%llu bytes) lies outside its segment [0x%llx, 0x%llx)",
                   (unsigned long long)ev.addr, (unsigned long long)size,
                   (unsigned long long)sg->addr, (unsigned long long)(sg->addr + sg->size));
    /* ... and in address order, each starting where the one before ends
     * (the segment's start for the first): PyTorch lists them by following
     * each block's successor from the segment's head */
    if (ev.addr != *next_addr) {
        if (!j)
            return bad(r,
                       "block 0x%llx starts after its segment's start 0x%llx, leaving a gap: a "
                       "segment's blocks tile it in address order",
                       (unsigned long long)ev.addr, (unsigned long long)*next_addr);
        return bad(r,
                   "block 0x%llx starts %s the previous one's end 0x%llx%s: a segment's blocks "
                   "tile it in address order",
                   (unsigned long long)ev.addr, ev.addr > *next_addr ? "after" : "before",
                   (unsigned long long)*next_addr, ev.addr > *next_addr ? ", leaving a gap" : "");
    }
    *next_addr = ev.addr + size;
    const pkl_value *state = pkl_dict_get(blk, "state");
    if (!pkl_str_eq(state, "active_allocated") && !pkl_str_eq(state, "active_pending_free"))
        return COOP_OK;
    /* PyTorch 2.0 wrote no "requested_size" either: the request is the
     * last "history" entry's "real_size". */
    const pkl_value *history = pkl_dict_get(blk, "history");
    int requested = pkl_dict_get(blk, "requested_size") != NULL; /* the request is known */
    if (!requested && history && history->kind == PKL_LIST && history->v.seq.len) {
        const pkl_value *last = history->v.seq.items[history->v.seq.len - 1];
        if ((st = small_dict(r, last, "history entry")) != COOP_OK ||
            (st = get_size(r, last, "real_size", 0, &ev.size)) != COOP_OK)
            return st;
        requested = pkl_dict_get(last, "real_size") != NULL;
    }
    if ((st = get_size(r, blk, "requested_size", 0, &ev.size)) != COOP_OK)
        return st;
    /* Allocated at the end but never seen allocated: live through the whole
     * recording, or allocated after it (place_unallocated decides). */
    const id_map_slot *s = id_map_find(&r->blocks, ev.addr, ev.stream);
    int adopted = !s;
    /* Seen allocated (or first freed) in the trace: PyTorch's alloc entry
     * and the block's requested_size (history's real_size) are both the
     * request, so the block is the trace's only if they agree (without
     * either, if it holds the request). Otherwise that block was freed and
     * this one allocated between PyTorch's copy of the trace and its copy
     * of the segments (two holds of the lock): as for a listed block over
     * one live at the trace's end (check_listed), neither copy says when,
     * so the snapshot is refused rather than read as either block. */
    if (s && (requested ? s->size != ev.size : s->size > size)) {
        char req[48] = "";
        if (requested)
            snprintf(req, sizeof req, ", %llu requested", (unsigned long long)ev.size);
        return bad(r,
                   "block 0x%llx (stream %llu, %llu bytes%s) is at the address and on the stream "
                   "of the block the entry at byte %llu allocated (%llu bytes requested) and did "
                   "not free, but cannot be that block: it was freed and this one allocated "
                   "between PyTorch's copies of the trace and of the segments, which neither "
                   "records (take the snapshot again)",
                   (unsigned long long)ev.addr, (unsigned long long)ev.stream,
                   (unsigned long long)size, req, (unsigned long long)s->where,
                   (unsigned long long)s->size);
    }
    if (GROW_ARRAY(r->listed, r->cap_listed, r->num_listed + 1, LISTED_FIRST))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    r->listed[r->num_listed++] = (listed_block){
        .addr = ev.addr,
        .last = last_byte(ev.addr, size),
        .size = size,
        .requested = ev.size,
        .stream = ev.stream,
        .at = blk->offset,
        .seg = seg,
        .blk = j,
        .adopted = adopted,
    };
    return COOP_OK;
}

/* segments[i] (seg): a reservation of the recorded allocator if on device,
 * and its blocks (read_block). */
static coop_status read_segment(snapshot_reader *r, const pkl_value *seg, size_t i, uint64_t device)
{
    set_where(r, WHERE_SEGMENT, i, 0, seg->offset);
    coop_status st;
    if ((st = small_dict(r, seg, "segment")) != COOP_OK ||
        (st = not_shared(r, seg, "segment")) != COOP_OK)
        return st;
    uint64_t seg_device = device;
    trace_segment s = {0};
    if ((st = get_u64(r, seg, "device", 0, 0, &seg_device)) != COOP_OK ||
        (st = get_u64(r, seg, "address", 1, 0, &s.addr)) != COOP_OK ||
        (st = get_size(r, seg, "total_size", 1, &s.size)) != COOP_OK ||
        (st = get_u64(r, seg, "stream", 0, 1, &s.stream)) != COOP_OK)
        return st;
    if (seg_device != device)
        return COOP_OK;
    if (s.size > UINT64_MAX - s.addr)
        return bad(r, "segment 0x%llx (%llu bytes) runs past the end of the 64-bit address space",
                   (unsigned long long)s.addr, (unsigned long long)s.size);
    if ((st = trace_builder_push_segment(&r->b, &s)) != COOP_OK)
        return st;
    if (GROW_ARRAY(r->seg_ranges, r->cap_seg_ranges, r->num_seg_ranges + 1, SEG_RANGES_FIRST))
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", r->path);
    r->seg_ranges[r->num_seg_ranges++] =
        (trace_segment_seen){.addr = s.addr, .size = s.size, .order = i, .at = seg->offset};
    const pkl_value *blocks = pkl_dict_get(seg, "blocks");
    if (!blocks)
        return COOP_OK;
    if (blocks->kind != PKL_LIST)
        return bad(r, "'%s' has type %s, expected list", "blocks", pkl_type_name(blocks));
    if ((st = not_shared(r, blocks, "'blocks'")) != COOP_OK)
        return st;
    /* Blocks tile their segment in address order: PyTorch 2.0 wrote no
     * block "address", and its _memory_viz adds up sizes. */
    uint64_t next_addr = s.addr;
    for (size_t j = 0; j < blocks->v.seq.len; j++)
        if ((st = read_block(r, blocks->v.seq.items[j], i, j, &s, &next_addr)) != COOP_OK)
            return st;
    /* ... up to its end: bytes in no block belong to no state */
    if (blocks->v.seq.len && next_addr != s.addr + s.size) {
        set_where(r, WHERE_SEGMENT, i, 0, seg->offset);
        return bad(r,
                   "segment [0x%llx, 0x%llx)'s blocks end at 0x%llx, short of its end: a "
                   "segment's blocks tile it in address order",
                   (unsigned long long)s.addr, (unsigned long long)(s.addr + s.size),
                   (unsigned long long)next_addr);
    }
    return COOP_OK;
}

/* The final `segments`: the recorded allocator's reservations, and blocks
 * allocated before recording began that are still allocated at the end. */
static coop_status read_segments(snapshot_reader *r, const pkl_value *segments, uint64_t device)
{
    for (size_t i = 0; i < segments->v.seq.len; i++) {
        coop_status st = read_segment(r, segments->v.seq.items[i], i, device);
        if (st != COOP_OK)
            return st;
    }
    coop_status st = check_listed(r);
    return st != COOP_OK ? st : check_segments(r);
}

/* Whether device_traces[i] (t) holds events. */
static int has_events(const pkl_value *t)
{
    return t->kind == PKL_LIST && t->v.seq.len > 0;
}

/* Picks the device: the one asked for, else the first with events. */
static coop_status pick_device(snapshot_reader *r, const pkl_value *traces, int device, size_t *out)
{
    size_t n = traces->v.seq.len;
    if (device >= 0) {
        /* the devices it has, named: "(3 devices recorded)" left the user
         * to work out that they are 0 to 2 */
        if ((size_t)device >= n && n > 1)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: device %d has no device_traces: the snapshot records "
                                  "devices 0 to %zu",
                                  r->path, device, n - 1);
        if ((size_t)device >= n)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: device %d has no device_traces: the snapshot records %s",
                                  r->path, device, n ? "device 0 only" : "no device");
        *out = (size_t)device;
        return COOP_OK;
    }
    *out = 0;
    for (size_t i = 0; i < n; i++)
        if (has_events(traces->v.seq.items[i])) {
            *out = i;
            break;
        }
    return COOP_OK;
}

static coop_status read_snapshot(snapshot_reader *r, const pkl_value *root, int device_wanted)
{
    set_where(r, WHERE_SNAPSHOT, 0, 0, root->offset);
    if (root->kind != PKL_DICT)
        return bad(r, "the pickle holds a %s, expected the snapshot dict", pkl_type_name(root));
    const pkl_value *traces = pkl_dict_get(root, "device_traces");
    const pkl_value *segments = pkl_dict_get(root, "segments");
    if (!traces)
        return bad(r,
                   "no '%s': not a memory snapshot, or history was not recorded "
                   "(call torch.cuda.memory._record_memory_history() first)",
                   "device_traces");
    if (traces->kind != PKL_LIST)
        return bad(r, "'%s' has type %s, expected list", "device_traces", pkl_type_name(traces));
    if (segments && segments->kind != PKL_LIST)
        return bad(r, "'%s' has type %s, expected list", "segments", pkl_type_name(segments));

    size_t device = 0;
    coop_status st = pick_device(r, traces, device_wanted, &device);
    if (st != COOP_OK)
        return st;
    r->device = device;
    r->num_devices = traces->v.seq.len;
    for (size_t i = 0; i < traces->v.seq.len; i++)
        r->devices_with_events += has_events(traces->v.seq.items[i]);
    if (device < traces->v.seq.len) {
        const pkl_value *list = traces->v.seq.items[device];
        if (list->kind != PKL_LIST) {
            set_where(r, WHERE_DEVICE, device, 0, list->offset);
            return bad(r, "has type %s, expected list", pkl_type_name(list));
        }
        for (size_t i = 0; i < list->v.seq.len; i++) {
            const pkl_value *entry = list->v.seq.items[i];
            set_where(r, WHERE_ENTRY, device, i, entry->offset);
            r->b.where = entry->offset;
            if ((st = read_entry(r, entry)) != COOP_OK)
                return st;
        }
        if ((st = check_adopted(r, list, device)) != COOP_OK)
            return st;
    }
    if (segments && (st = read_segments(r, segments, device)) != COOP_OK)
        return st;
    trace_builder_sort_live_by_addr(&r->b);
    return COOP_OK;
}

/* Every dict key this file looks up (pkl_dict_get). */
static const char *const snapshot_keys[] = {
    "device_traces", "segments", "action",  "addr",           "size",
    "stream",        "time_us",  "device",  "address",        "total_size",
    "blocks",        "state",    "history", "requested_size", "real_size",
};

static coop_status scan_piece(void *ctx, const unsigned char *p, size_t n)
{
    return pkl_scan_feed(ctx, p, n);
}

static coop_status stream_read(void *ctx, unsigned char *buf, size_t cap, size_t *got)
{
    return trace_input_stream_read(ctx, buf, cap, got);
}

static coop_status read_pickle(const char *path, int device, int seal, trace *out)
{
    *out = (trace){0};
    /* A regular file is read twice, never whole: a first pass counts its
     * bytes and scans its memo (what pkl_parse_sealed scans before it
     * parses), a second parses it through a window (pkl_parse_stream). A
     * pipe is read once, whole. Same tree, messages and limits either way
     * (docs/replay.md, "The snapshot reader's memory"). */
    unsigned char *data = NULL;
    size_t len = 0;
    pkl_scan scan = {.path = path};
    trace_input_stream in; /* the regular file, held open for both reads */
    int stream = trace_input_rereadable(&in, path);
    coop_status st = stream ? trace_input_each(&in, scan_piece, &scan, &len)
                            : trace_input_slurp(path, &data, &len);
    if (st != COOP_OK) {
        trace_input_stream_close(&in);
        pkl_scan_free(&scan);
        return st;
    }
    /* What this reader and trace_torch_settings_read look up; every other
     * key's value (the frames of each entry and block) is pruned as it is
     * parsed, and each trace entry, once in its list, is sealed into its
     * node (seal_entry): about 220 bytes of RSS an event, the pickle's 96
     * among them, instead of 590 pruned only and 1,100 whole (tests/README.md,
     * "Scaling with trace size"). */
    enum { NUM_SNAPSHOT_KEYS = sizeof snapshot_keys / sizeof snapshot_keys[0] };
    const char *keys[NUM_SNAPSHOT_KEYS + TRACE_TORCH_SETTINGS_NUM_KEYS + 1];
    memcpy(keys, snapshot_keys, sizeof snapshot_keys);
    *trace_torch_settings_keys(keys + NUM_SNAPSHOT_KEYS) = NULL;
    pkl_arena arena = {0};
    const pkl_value *root;
    seal_keys sk = {.keys = keys};
    _Static_assert(NUM_SUMMARY_KEYS + sizeof keys / sizeof keys[0] <=
                       sizeof sk.lens / sizeof sk.lens[0],
                   "seal_keys holds every length");
    for (size_t k = 0; k < NUM_SUMMARY_KEYS; k++)
        sk.lens[k] = strlen(summary_keys[k]);
    for (size_t j = 0; keys[j]; j++)
        sk.lens[NUM_SUMMARY_KEYS + j] = strlen(keys[j]);
    if (stream) {
        st = trace_input_stream_open(&in);
        if (st == COOP_OK) {
            st = pkl_parse_stream(path, &scan, stream_read, &in, keys, seal ? seal_entry : NULL,
                                  &sk, &arena, &root);
            /* the file is checked once the parse is done with it: a tree
             * parsed from a file written during the read is dropped, and a
             * parse that failed on bytes written during it is reported as
             * the change */
            if (st != COOP_OK)
                st = trace_input_stream_failed(&in, st);
            else if ((st = trace_input_stream_finish(&in)) != COOP_OK)
                pkl_arena_free(&arena);
        }
        trace_input_stream_close(&in);
    } else {
        st = pkl_parse_sealed(path, data, len, keys, seal ? seal_entry : NULL, &sk, &arena, &root);
    }
    pkl_scan_free(&scan);
    /* The tree holds copies of its strings: the file's bytes (most of the
     * reader's memory with frames) go before the events are built, which
     * took the peak from file + tree + events to the larger of file + tree
     * and tree + events (docs/replay.md, "The snapshot reader's memory"). */
    free(data);
    if (st == COOP_OK) {
        snapshot_reader r = {.path = path};
        trace_builder_init(&r.b, path);
        r.b.where_kind = TRACE_WHERE_BYTE;
        st = read_snapshot(&r, root, device);
        if (st == COOP_OK)
            st = trace_builder_finish(&r.b, out);
        if (st == COOP_OK) { /* after finish, which zeroes *out */
            trace_torch_settings_read(root, out);
            out->snapshot_device = r.device;
            out->snapshot_num_devices = r.num_devices;
            out->snapshot_devices_with_events = r.devices_with_events;
        }
        trace_builder_discard(&r.b);
        id_map_free(&r.blocks);
        live_ranges_free(&r.live);
        free(r.adopted);
        free(r.listed);
        free(r.seg_ranges);
        pkl_arena_free(&arena);
    }
    return st;
}

coop_status trace_read_pickle_device(const char *path, int device, trace *out)
{
    return read_pickle(path, device, 1, out);
}

coop_status trace_read_pickle_unsealed(const char *path, int device, trace *out)
{
    return read_pickle(path, device, 0, out);
}

coop_status trace_read_pickle(const char *path, trace *out)
{
    return trace_read_pickle_device(path, -1, out);
}
