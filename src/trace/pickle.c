/* A pickle virtual machine restricted to plain data (see pickle.h). */
#include <stdlib.h>
#include <string.h>

#include "growable.h"
#include "status.h"
#include "trace/pickle.h"

/* ------------------------------------------------------------------------
 * Arena: nodes and item arrays live until pkl_arena_free
 * ---------------------------------------------------------------------- */

struct pkl_chunk {
    pkl_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char bytes[];
};

#define CHUNK_BYTES ((size_t)1 << 20)

/* n bytes (rounded up to 16) from the chunks of *chunks, a new chunk added
 * to *bytes when the newest is full. */
static void *chunk_alloc(pkl_chunk **chunks, size_t *bytes, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    pkl_chunk *c = *chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = *chunks;
        *chunks = c;
        *bytes += cap;
    }
    void *p = c->bytes + c->used;
    c->used += n;
    return p;
}

static void *arena_alloc(pkl_arena *a, size_t n)
{
    return chunk_alloc(&a->chunks, &a->bytes, n);
}

static void free_chunks(pkl_chunk *c)
{
    while (c) {
        pkl_chunk *next = c->next;
        free(c);
        c = next;
    }
}

void pkl_arena_free(pkl_arena *arena)
{
    free_chunks(arena->chunks);
    free_chunks(arena->str_chunks);
    *arena = (pkl_arena){0};
}

/* Pruning (pkl_parse_pruned) gives nodes and item arrays back to the arena's
 * free lists, each block's first bytes holding the next. Item capacities are
 * 4 << k items (seq_extend doubles from 4), so arrays of one capacity share
 * list k. */
static void arena_give_back(void **list, void *block)
{
    memcpy(block, list, sizeof *list);
    *list = block;
}

static void *arena_reuse(void **list)
{
    void *block = *list;
    if (block)
        memcpy(list, block, sizeof *list);
    return block;
}

static size_t array_class(size_t cap)
{
    size_t k = 0;
    while (((size_t)4 << k) < cap)
        k++;
    return k;
}

/* Strings' copies (push_str) have capacities of 16 << k bytes, k their
 * class: a pruned string's bytes go back to list k of free_strs. */
static size_t str_class(size_t len)
{
    size_t k = 0;
    while (((size_t)16 << k) < len)
        k++;
    return k;
}

/* ------------------------------------------------------------------------
 * Opcodes
 * ---------------------------------------------------------------------- */

enum {
    OP_MARK = '(',
    OP_STOP = '.',
    OP_BININT = 'J',
    OP_BININT1 = 'K',
    OP_BININT2 = 'M',
    OP_NONE = 'N',
    OP_BINUNICODE = 'X',
    OP_APPEND = 'a',
    OP_DICT = 'd',
    OP_EMPTY_DICT = '}',
    OP_APPENDS = 'e',
    OP_BINGET = 'h',
    OP_LONG_BINGET = 'j',
    OP_LIST = 'l',
    OP_EMPTY_LIST = ']',
    OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r',
    OP_SETITEM = 's',
    OP_TUPLE = 't',
    OP_EMPTY_TUPLE = ')',
    OP_SETITEMS = 'u',
    OP_BINFLOAT = 'G',
    OP_BINBYTES = 'B',
    OP_SHORT_BINBYTES = 'C',
    OP_PROTO = 0x80,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d,
    OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
};

/* Every opcode of pickle protocols 0 to 5, by byte. */
static const char *const opcode_names[256] = {
    ['('] = "MARK",
    ['.'] = "STOP",
    ['0'] = "POP",
    ['1'] = "POP_MARK",
    ['2'] = "DUP",
    ['F'] = "FLOAT",
    ['I'] = "INT",
    ['J'] = "BININT",
    ['K'] = "BININT1",
    ['L'] = "LONG",
    ['M'] = "BININT2",
    ['N'] = "NONE",
    ['P'] = "PERSID",
    ['Q'] = "BINPERSID",
    ['R'] = "REDUCE",
    ['S'] = "STRING",
    ['T'] = "BINSTRING",
    ['U'] = "SHORT_BINSTRING",
    ['V'] = "UNICODE",
    ['X'] = "BINUNICODE",
    ['a'] = "APPEND",
    ['b'] = "BUILD",
    ['c'] = "GLOBAL",
    ['d'] = "DICT",
    ['}'] = "EMPTY_DICT",
    ['e'] = "APPENDS",
    ['g'] = "GET",
    ['h'] = "BINGET",
    ['i'] = "INST",
    ['j'] = "LONG_BINGET",
    ['l'] = "LIST",
    [']'] = "EMPTY_LIST",
    ['o'] = "OBJ",
    ['p'] = "PUT",
    ['q'] = "BINPUT",
    ['r'] = "LONG_BINPUT",
    ['s'] = "SETITEM",
    ['t'] = "TUPLE",
    [')'] = "EMPTY_TUPLE",
    ['u'] = "SETITEMS",
    ['G'] = "BINFLOAT",
    [0x80] = "PROTO",
    [0x81] = "NEWOBJ",
    [0x82] = "EXT1",
    [0x83] = "EXT2",
    [0x84] = "EXT4",
    [0x85] = "TUPLE1",
    [0x86] = "TUPLE2",
    [0x87] = "TUPLE3",
    [0x88] = "NEWTRUE",
    [0x89] = "NEWFALSE",
    [0x8a] = "LONG1",
    [0x8b] = "LONG4",
    ['B'] = "BINBYTES",
    ['C'] = "SHORT_BINBYTES",
    [0x8c] = "SHORT_BINUNICODE",
    [0x8d] = "BINUNICODE8",
    [0x8e] = "BINBYTES8",
    [0x8f] = "EMPTY_SET",
    [0x90] = "ADDITEMS",
    [0x91] = "FROZENSET",
    [0x92] = "NEWOBJ_EX",
    [0x93] = "STACK_GLOBAL",
    [0x94] = "MEMOIZE",
    [0x95] = "FRAME",
    [0x96] = "BYTEARRAY8",
    [0x97] = "NEXT_BUFFER",
    [0x98] = "READONLY_BUFFER",
};

const char *pkl_opcode_name(unsigned char op)
{
    return opcode_names[op];
}

/* Opcodes that import a name or call an object: loading them would run code. */
static int runs_code(unsigned char op)
{
    switch (op) {
    case 'c':
    case 0x93:
    case 'R':
    case 'b':
    case 'i':
    case 'o':
    case 0x81:
    case 0x92:
    case 'P':
    case 'Q':
    case 0x82:
    case 0x83:
    case 0x84:
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------------
 * The machine
 * ---------------------------------------------------------------------- */

typedef struct machine {
    const char *path;
    /* The input's bytes [win_at, win_end) are at win (all of them when the
     * parse is given the whole input; a window of wbuf over a stream read
     * through read_fn otherwise, refilled by need()): */
    const unsigned char *win;
    size_t win_at, win_end;
    unsigned char *wbuf;
    size_t wcap;
    pkl_read_fn read_fn;
    void *read_ctx;
    size_t len, pos;
    size_t op_at; /* offset of the opcode being executed */
    unsigned char op;
    pkl_arena *arena;
    pkl_value **stack;
    size_t depth, stack_cap;
    size_t *marks; /* stack depths at each MARK */
    size_t num_marks, marks_cap;
    pkl_value **memo;
    size_t memo_len, memo_cap; /* memo_len: next MEMOIZE index */
    size_t ops;                /* opcodes executed: bounds memo indices */
    size_t memory_limit;       /* bytes: see PKL_MEMORY_PER_BYTE */
    /* pkl_parse_pruned only (read_keys NULL otherwise): */
    const char *const *read_keys;
    size_t *read_key_lens;  /* strlen of each */
    unsigned char *fetched; /* bit i: some BINGET of the file fetches memo entry i */
    size_t fetched_cap;     /* bytes */
    pkl_seal_fn seal;       /* pkl_parse_sealed only (NULL otherwise) */
    void *seal_ctx;
} machine;

static coop_status fail(const machine *m, const char *what)
{
    return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s %s", m->path, m->op_at,
                          opcode_names[m->op] ? opcode_names[m->op] : "opcode", what);
}

static coop_status out_of_memory(const machine *m)
{
    return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: byte %zu: out of memory", m->path, m->op_at);
}

/* Checks the parse's memory (arena, stack, memo, marks) against its bound,
 * after each growth: a stream of 1-byte opcodes that each make a node would
 * otherwise take about 56 bytes per input byte (2.8 GB from a 48 KB .gz).
 * pkl_parse_pruned's memo bitmap (m->fetched) is left out: made before the
 * parse, at most a quarter byte per input byte (4 KiB at least), it would
 * make the pruned parse refuse an input pkl_parse accepts near the bound. */
static coop_status check_memory(const machine *m)
{
    size_t used = m->arena->bytes + (m->stack_cap + m->memo_cap) * sizeof(pkl_value *) +
                  m->marks_cap * sizeof(size_t);
    if (used <= m->memory_limit)
        return COOP_OK;
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: byte %zu: loading the pickle needs more than %zu bytes of memory "
                          "(%d per input byte): not the shape of a memory snapshot",
                          m->path, m->op_at, m->memory_limit, PKL_MEMORY_PER_BYTE);
}

/* Makes the input's bytes [pos, pos + n) readable at win (m->len - pos >= n
 * and n <= wcap when streaming): moves what is left of the window to its
 * start and reads more. The stream's length was known from its first pass
 * (pkl_scan), so one ending early changed in between. */
static coop_status need(machine *m, size_t n)
{
    if (m->pos + n <= m->win_end)
        return COOP_OK;
    size_t keep = m->win_end - m->pos;
    memmove(m->wbuf, m->wbuf + (m->pos - m->win_at), keep);
    m->win_at = m->pos;
    while (m->win_end - m->win_at < n) {
        size_t room = m->wcap - (m->win_end - m->win_at), left = m->len - m->win_end, got = 0;
        coop_status st = m->read_fn(m->read_ctx, m->wbuf + (m->win_end - m->win_at),
                                    room < left ? room : left, &got);
        if (st != COOP_OK)
            return st;
        if (got == 0)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: byte %zu: the file changed while it was read: %zu bytes "
                                  "the first time, %zu the second",
                                  m->path, m->win_end, m->len, m->win_end);
        m->win_end += got;
    }
    return COOP_OK;
}

/* Argument bytes of the current opcode, or NULL (and an error) if the file
 * ends first. Valid until the next take. */
static const unsigned char *take(machine *m, size_t n, coop_status *st)
{
    if (m->len - m->pos < n) {
        *st = coop_set_error(COOP_ERR_INVALID,
                             "%s: byte %zu: truncated: %s needs %zu argument bytes, "
                             "the file has %zu left",
                             m->path, m->op_at, opcode_names[m->op], n, m->len - m->pos);
        return NULL;
    }
    if ((*st = need(m, n)) != COOP_OK)
        return NULL;
    const unsigned char *p = m->win + (m->pos - m->win_at);
    m->pos += n;
    return p;
}

static uint64_t little_endian(const unsigned char *p, size_t n)
{
    uint64_t x = 0;
    for (size_t i = n; i-- > 0;)
        x = x << 8 | p[i];
    return x;
}

/* The first capacity (items) of the machine's stack, memo and marks. */
#define MACHINE_ARRAY_FIRST 64

static pkl_value *new_value(machine *m, pkl_kind kind)
{
    pkl_value *v = arena_reuse(&m->arena->free_nodes);
    if (!v)
        v = arena_alloc(m->arena, sizeof *v);
    if (v) {
        memset(v, 0, sizeof *v);
        v->kind = (uint8_t)kind;
        v->offset = m->op_at;
    }
    return v;
}

static coop_status push(machine *m, pkl_value *v)
{
    if (!v)
        return out_of_memory(m);
    if (GROW_ARRAY(m->stack, m->stack_cap, m->depth + 1, MACHINE_ARRAY_FIRST))
        return out_of_memory(m);
    m->stack[m->depth++] = v;
    return check_memory(m);
}

static pkl_value *top(const machine *m)
{
    size_t floor = m->num_marks ? m->marks[m->num_marks - 1] : 0;
    return m->depth > floor ? m->stack[m->depth - 1] : NULL;
}

static void give_back_array(machine *m, pkl_value **items, size_t cap)
{
    size_t k = array_class(cap);
    if (k < PKL_ARRAY_CLASSES)
        arena_give_back(&m->arena->free_arrays[k], items);
}

/* Appends items to a list, tuple or dict's item array (arena-allocated,
 * doubling: total waste stays below the final size). */
static coop_status seq_extend(machine *m, pkl_value *seq, pkl_value *const *items, size_t n)
{
    size_t need = seq->v.seq.len + n;
    if (need > seq->v.seq.cap) {
        size_t cap = seq->v.seq.cap ? seq->v.seq.cap : 4;
        while (cap < need)
            cap *= 2;
        size_t k = array_class(cap);
        pkl_value **grown = NULL;
        if (m->read_keys && k < PKL_ARRAY_CLASSES)
            grown = arena_reuse(&m->arena->free_arrays[k]);
        if (!grown)
            grown = arena_alloc(m->arena, cap * sizeof *grown);
        if (!grown)
            return out_of_memory(m);
        if (seq->v.seq.len)
            memcpy(grown, seq->v.seq.items, seq->v.seq.len * sizeof *grown);
        if (m->read_keys && seq->v.seq.cap)
            give_back_array(m, seq->v.seq.items, seq->v.seq.cap);
        seq->v.seq.items = grown;
        seq->v.seq.cap = cap;
        coop_status st = check_memory(m);
        if (st != COOP_OK)
            return st;
    }
    if (n)
        memcpy(seq->v.seq.items + seq->v.seq.len, items, n * sizeof *items);
    seq->v.seq.len = need;
    return COOP_OK;
}

/* Pops the innermost MARK: *items and *n are the values above it (still in the
 * stack array, valid until the next push). */
static coop_status pop_mark(machine *m, pkl_value ***items, size_t *n)
{
    if (!m->num_marks)
        return fail(m, "without a MARK before it");
    size_t at = m->marks[--m->num_marks];
    *items = m->stack ? m->stack + at : NULL; /* nothing pushed yet: no array */
    *n = m->depth - at;
    m->depth = at;
    return COOP_OK;
}

static int is_container(const pkl_value *v)
{
    return v->kind == PKL_LIST || v->kind == PKL_TUPLE || v->kind == PKL_DICT;
}

static int hashable(const pkl_value *v)
{
    return v->kind != PKL_LIST && v->kind != PKL_DICT;
}

/* Whether the consumer of pkl_parse_pruned reads dict values under key. */
static int key_is_read(const machine *m, const pkl_value *key)
{
    if (key->kind != PKL_STR)
        return 1; /* pkl_dict_get finds str keys only; other keys' values stay whole */
    for (size_t i = 0; m->read_keys[i]; i++)
        if (pkl_str_eq_len(key, m->read_keys[i], m->read_key_lens[i]))
            return 1;
    return 0;
}

/* Drops the items of v, a list, tuple or dict no BINGET can fetch, just set
 * under a key the consumer never reads, and gives back every node below it
 * that no BINGET can fetch either. Such a node was pushed once, when made,
 * and taken off the stack into one container: it has one parent and is on no
 * stack, so freeing it leaves nothing pointing at it but the memo entries
 * no BINGET reads (memo_get refuses those). Iterative: a chain of nested
 * lists one opcode each must not exhaust the C stack. The nodes still to
 * walk are chained through their offset fields (each is given back once
 * walked, and walked once: it has one parent), not held in an array: an
 * array would be memory the whole parse never needs, and the pruned parse
 * must fit wherever pkl_parse does. */
_Static_assert(sizeof(pkl_value *) <= sizeof(size_t), "a node's offset field holds a link");

static void drop_items(machine *m, pkl_value *v)
{
    pkl_value *pending = NULL;
    pkl_value *cur = v;
    for (;;) {
        if (is_container(cur) && !cur->sealed && cur->v.seq.cap) {
            for (size_t i = 0; i < cur->v.seq.len; i++) {
                pkl_value *item = cur->v.seq.items[i];
                if (item->pinned)
                    continue;
                memcpy(&item->offset, &pending, sizeof pending);
                pending = item;
            }
            give_back_array(m, cur->v.seq.items, cur->v.seq.cap);
        }
        if (cur != v) {
            if ((cur->kind == PKL_STR || cur->kind == PKL_BYTES) && cur->v.str.len &&
                str_class(cur->v.str.len) < PKL_ARRAY_CLASSES)
                arena_give_back(&m->arena->free_strs[str_class(cur->v.str.len)],
                                (void *)cur->v.str.ptr);
            arena_give_back(&m->arena->free_nodes, cur);
        }
        if (!pending)
            break;
        cur = pending;
        memcpy(&pending, &cur->offset, sizeof pending);
    }
    memset(&v->v.seq, 0, sizeof v->v.seq);
}

static void prune(machine *m, pkl_value *v)
{
    drop_items(m, v);
    v->pruned = 1;
}

/* Offers each dict just put in a list by APPEND or APPENDS to the consumer's
 * seal (pkl_parse_sealed). A dict no BINGET fetches was pushed once, when
 * made, and has left the stack for this list: nothing can reach it but
 * through the list, nor change it, so what the consumer keeps of it now is
 * what it would read at the end; its items are dropped as prune drops them. */
static void seal_dicts(machine *m, pkl_value *const *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pkl_value *d = items[i];
        if (d->kind != PKL_DICT || d->pinned || d->pruned || d->sealed)
            continue;
        uint64_t summary[4] = {0};
        uint16_t tag = 0;
        if (!m->seal(m->seal_ctx, d, summary, &tag))
            continue;
        drop_items(m, d);
        memcpy(d->v.summary, summary, sizeof summary);
        d->tag = tag;
        d->sealed = 1;
    }
}

static coop_status set_items(machine *m, pkl_value *dict, pkl_value *const *kv, size_t n)
{
    if (n % 2)
        return fail(m, "has a key without a value");
    for (size_t i = 0; i < n; i += 2)
        if (!hashable(kv[i]))
            return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s: unhashable %s as a dict key",
                                  m->path, m->op_at, opcode_names[m->op], pkl_type_name(kv[i]));
    coop_status st = seq_extend(m, dict, kv, n);
    for (size_t i = 1; st == COOP_OK && m->read_keys && i < n; i += 2)
        if (is_container(kv[i]) && !kv[i]->pinned && !kv[i]->pruned && !key_is_read(m, kv[i - 1]))
            prune(m, kv[i]);
    return st;
}

static coop_status make_seq(machine *m, pkl_kind kind, pkl_value *const *items, size_t n)
{
    pkl_value *v = new_value(m, kind);
    if (!v)
        return out_of_memory(m);
    coop_status st = kind == PKL_DICT ? set_items(m, v, items, n) : seq_extend(m, v, items, n);
    if (st != COOP_OK)
        return st;
    return push(m, v);
}

static coop_status push_int(machine *m, int64_t x)
{
    pkl_value *v = new_value(m, PKL_INT);
    if (v)
        v->v.i = x;
    return push(m, v);
}

static coop_status push_str(machine *m, pkl_kind kind, size_t len_bytes)
{
    coop_status st = COOP_OK;
    const unsigned char *p = take(m, len_bytes, &st);
    if (!p)
        return st;
    uint64_t n = little_endian(p, len_bytes);
    if (n > m->len - m->pos)
        return coop_set_error(
            COOP_ERR_INVALID, "%s: byte %zu: truncated: %s of %llu bytes, the file has %zu left",
            m->path, m->op_at, opcode_names[m->op], (unsigned long long)n, m->len - m->pos);
    /* A copy, not a pointer into data: the caller may free the input once
     * the parse is done (the reader's buffer is most of its memory then). */
    pkl_value *v = new_value(m, kind);
    if (!v)
        return out_of_memory(m);
    if (n) {
        size_t k = str_class((size_t)n);
        char *copy = k < PKL_ARRAY_CLASSES ? arena_reuse(&m->arena->free_strs[k]) : NULL;
        if (!copy)
            copy = chunk_alloc(&m->arena->str_chunks, &m->arena->str_bytes,
                               k < PKL_ARRAY_CLASSES ? (size_t)16 << k : (size_t)n);
        if (!copy)
            return out_of_memory(m);
        v->v.str.ptr = copy;
        v->v.str.len = 0; /* a node on no stack yet: nothing reads it if the copy fails */
        for (size_t done = 0; done < n;) { /* a window at a time: a string may be longer */
            size_t piece = (size_t)n - done, avail = m->win_end - m->pos;
            if (piece > avail)
                piece = avail ? avail : piece < m->wcap ? piece : m->wcap;
            if ((st = need(m, piece)) != COOP_OK)
                return st;
            memcpy(copy + done, m->win + (m->pos - m->win_at), piece);
            m->pos += piece;
            done += piece;
        }
    } else {
        v->v.str.ptr = "";
    }
    v->v.str.len = (size_t)n;
    return push(m, v);
}

/* LONG1: n little-endian two's complement bytes. Values from -2^63 to
 * 2^64 - 1 are kept (stream handles are unsigned 64-bit pointers). */
static coop_status push_long1(machine *m)
{
    coop_status st = COOP_OK;
    const unsigned char *p = take(m, 1, &st);
    if (!p)
        return st;
    size_t n = p[0];
    if (!(p = take(m, n, &st)))
        return st;
    pkl_value *v = new_value(m, PKL_INT);
    if (!v)
        return out_of_memory(m);
    if (n == 0) {
        v->v.i = 0;
    } else if (n <= 8) {
        uint64_t x = little_endian(p, n);
        if (n < 8 && (p[n - 1] & 0x80))
            x |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        v->v.i = (int64_t)x;
    } else {
        /* 9 or more bytes fit in 64 bits only as a non-negative value below
         * 2^64 whose extra bytes are zero padding. */
        for (size_t i = 8; i < n; i++)
            if (p[i] != 0)
                return fail(m, "holds an integer outside -2^63 .. 2^64-1");
        uint64_t x = little_endian(p, 8);
        v->v.u = x;
        v->big = (x >> 63) != 0;
    }
    return push(m, v);
}

/* Whether memo entry index is fetched by some BINGET (pkl_parse_pruned: see
 * scan_fetches; pkl_parse prunes nothing and needs no answer). */
static int fetched(const machine *m, uint64_t index)
{
    return m->read_keys && index / 8 < m->fetched_cap && (m->fetched[index / 8] >> (index % 8) & 1);
}

static coop_status memo_put(machine *m, uint64_t index)
{
    pkl_value *v = top(m);
    if (!v)
        return fail(m, "with an empty stack");
    /* A pickler memoizes objects it has emitted, so an index beyond the
     * opcodes read so far is corrupt; bounding it bounds memory. */
    if (index > m->ops)
        return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s index %llu out of range", m->path,
                              m->op_at, opcode_names[m->op], (unsigned long long)index);
    if (GROW_ARRAY(m->memo, m->memo_cap, (size_t)index + 1, MACHINE_ARRAY_FIRST))
        return out_of_memory(m);
    while (m->memo_len <= index)
        m->memo[m->memo_len++] = NULL;
    m->memo[index] = v;
    if (fetched(m, index))
        v->pinned = 1;
    return check_memory(m);
}

static coop_status memo_get(machine *m, uint64_t index)
{
    if (index >= m->memo_len || !m->memo[index])
        return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s of memo entry %llu, never set",
                              m->path, m->op_at, opcode_names[m->op], (unsigned long long)index);
    /* Only pinned values are sure to be whole: a fetch the scan missed
     * (which it cannot) must not read a pruned one. */
    if (m->read_keys && !fetched(m, index))
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: byte %zu: %s of memo entry %llu, which the scan before parsing "
                              "did not see (a bug in coop)",
                              m->path, m->op_at, opcode_names[m->op], (unsigned long long)index);
    m->memo[index]->shared = 1;
    return push(m, m->memo[index]);
}

/* Executes one opcode (already read into m->op). *done is set by STOP. */
static coop_status step(machine *m, int *done)
{
    coop_status st = COOP_OK;
    const unsigned char *p;
    pkl_value **items = NULL, *v;
    size_t n = 0;

    switch (m->op) {
    case OP_PROTO:
        if (!(p = take(m, 1, &st)))
            return st;
        if (p[0] < 2 || p[0] > 5)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: byte %zu: pickle protocol %u is not supported (2 to 5 are)",
                                  m->path, m->op_at, p[0]);
        return COOP_OK;
    case OP_FRAME:
        /* Only a read-ahead hint; a frame longer than the rest of the file
         * means the file was cut. */
        if (!(p = take(m, 8, &st)))
            return st;
        if (little_endian(p, 8) > m->len - m->pos)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: byte %zu: truncated: FRAME of %llu bytes, the file has "
                                  "%zu left",
                                  m->path, m->op_at, (unsigned long long)little_endian(p, 8),
                                  m->len - m->pos);
        return COOP_OK;
    case OP_MARK:
        if (GROW_ARRAY(m->marks, m->marks_cap, m->num_marks + 1, MACHINE_ARRAY_FIRST))
            return out_of_memory(m);
        m->marks[m->num_marks++] = m->depth;
        return check_memory(m);
    case OP_STOP:
        if (m->num_marks || m->depth != 1)
            return fail(m, m->num_marks ? "with an unclosed MARK"
                                        : "with other than one value on the stack");
        *done = 1;
        return COOP_OK;
    case OP_EMPTY_DICT:
        return push(m, new_value(m, PKL_DICT));
    case OP_EMPTY_LIST:
        return push(m, new_value(m, PKL_LIST));
    case OP_EMPTY_TUPLE:
        return push(m, new_value(m, PKL_TUPLE));
    case OP_NONE:
        return push(m, new_value(m, PKL_NONE));
    case OP_NEWTRUE:
    case OP_NEWFALSE:
        if ((v = new_value(m, PKL_BOOL)))
            v->v.i = m->op == OP_NEWTRUE;
        return push(m, v);
    case OP_DICT:
    case OP_LIST:
    case OP_TUPLE:
        if ((st = pop_mark(m, &items, &n)) != COOP_OK)
            return st;
        return make_seq(m,
                        m->op == OP_DICT   ? PKL_DICT
                        : m->op == OP_LIST ? PKL_LIST
                                           : PKL_TUPLE,
                        items, n);
    case OP_TUPLE1:
    case OP_TUPLE2:
    case OP_TUPLE3:
        n = (size_t)(m->op - OP_TUPLE1 + 1);
        if (!top(m) || m->depth - (m->num_marks ? m->marks[m->num_marks - 1] : 0) < n)
            return fail(m, "needs more values on the stack");
        m->depth -= n;
        return make_seq(m, PKL_TUPLE, m->stack + m->depth, n);
    case OP_APPEND:
    case OP_SETITEM:
        n = m->op == OP_APPEND ? 1 : 2;
        if (!top(m) || m->depth - (m->num_marks ? m->marks[m->num_marks - 1] : 0) < n + 1)
            return fail(m, "needs more values on the stack");
        m->depth -= n;
        v = m->stack[m->depth - 1];
        if (v->kind != (m->op == OP_APPEND ? PKL_LIST : PKL_DICT))
            return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s to a %s", m->path, m->op_at,
                                  opcode_names[m->op], pkl_type_name(v));
        if (m->op == OP_SETITEM)
            return set_items(m, v, m->stack + m->depth, 2);
        if ((st = seq_extend(m, v, m->stack + m->depth, 1)) == COOP_OK && m->seal)
            seal_dicts(m, m->stack + m->depth, 1);
        return st;
    case OP_APPENDS:
    case OP_SETITEMS:
        if ((st = pop_mark(m, &items, &n)) != COOP_OK)
            return st;
        if (!(v = top(m)))
            return fail(m, "without a container before its MARK");
        if (v->kind != (m->op == OP_APPENDS ? PKL_LIST : PKL_DICT))
            return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: %s to a %s", m->path, m->op_at,
                                  opcode_names[m->op], pkl_type_name(v));
        if (m->op == OP_SETITEMS)
            return set_items(m, v, items, n);
        if ((st = seq_extend(m, v, items, n)) == COOP_OK && m->seal)
            seal_dicts(m, items, n);
        return st;
    case OP_SHORT_BINUNICODE:
        return push_str(m, PKL_STR, 1);
    case OP_BINUNICODE:
        return push_str(m, PKL_STR, 4);
    case OP_BINUNICODE8:
        return push_str(m, PKL_STR, 8);
    case OP_SHORT_BINBYTES:
        return push_str(m, PKL_BYTES, 1);
    case OP_BINBYTES:
        return push_str(m, PKL_BYTES, 4);
    case OP_BININT:
        if (!(p = take(m, 4, &st)))
            return st;
        /* 4-byte two's complement */
        return push_int(m, (int64_t)little_endian(p, 4) - (p[3] & 0x80 ? (int64_t)1 << 32 : 0));
    case OP_BININT1:
        if (!(p = take(m, 1, &st)))
            return st;
        return push_int(m, p[0]);
    case OP_BININT2:
        if (!(p = take(m, 2, &st)))
            return st;
        return push_int(m, (int64_t)little_endian(p, 2));
    case OP_LONG1:
        return push_long1(m);
    case OP_BINFLOAT: {
        if (!(p = take(m, 8, &st)))
            return st;
        uint64_t bits = 0; /* big-endian IEEE 754 double */
        for (int i = 0; i < 8; i++)
            bits = bits << 8 | p[i];
        if ((v = new_value(m, PKL_FLOAT)))
            memcpy(&v->v.f, &bits, sizeof bits);
        return push(m, v);
    }
    case OP_MEMOIZE:
        return memo_put(m, m->memo_len);
    case OP_BINPUT:
        if (!(p = take(m, 1, &st)))
            return st;
        return memo_put(m, p[0]);
    case OP_LONG_BINPUT:
        if (!(p = take(m, 4, &st)))
            return st;
        return memo_put(m, little_endian(p, 4));
    case OP_BINGET:
        if (!(p = take(m, 1, &st)))
            return st;
        return memo_get(m, p[0]);
    case OP_LONG_BINGET:
        if (!(p = take(m, 4, &st)))
            return st;
        return memo_get(m, little_endian(p, 4));
    default:
        if (runs_code(m->op))
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: byte %zu: pickle opcode %s (0x%02x) is not allowed: coop "
                                  "never executes code from a pickle",
                                  m->path, m->op_at, opcode_names[m->op], m->op);
        if (opcode_names[m->op])
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s: byte %zu: pickle opcode %s (0x%02x) is not supported: "
                                  "PyTorch memory snapshots do not use it",
                                  m->path, m->op_at, opcode_names[m->op], m->op);
        return coop_set_error(COOP_ERR_INVALID, "%s: byte %zu: 0x%02x is not a pickle opcode",
                              m->path, m->op_at, m->op);
    }
}

/* The argument of each opcode step() executes, for scan_fetches: ARG_FIXED
 * plus its bytes, or ARG_PREFIXED plus the bytes of the little-endian length
 * that precedes its data (ARG_GET: the argument is a memo index to fetch); 0
 * for STOP and for an opcode step() refuses: the scan ends there. */
enum { ARG_FIXED = 0x10, ARG_PREFIXED = 0x20, ARG_GET = 0x40 };
static const unsigned char argument_of[256] = {
    [OP_MARK] = ARG_FIXED,
    [OP_NONE] = ARG_FIXED,
    [OP_APPEND] = ARG_FIXED,
    [OP_DICT] = ARG_FIXED,
    [OP_EMPTY_DICT] = ARG_FIXED,
    [OP_APPENDS] = ARG_FIXED,
    [OP_LIST] = ARG_FIXED,
    [OP_EMPTY_LIST] = ARG_FIXED,
    [OP_SETITEM] = ARG_FIXED,
    [OP_TUPLE] = ARG_FIXED,
    [OP_EMPTY_TUPLE] = ARG_FIXED,
    [OP_SETITEMS] = ARG_FIXED,
    [OP_TUPLE1] = ARG_FIXED,
    [OP_TUPLE2] = ARG_FIXED,
    [OP_TUPLE3] = ARG_FIXED,
    [OP_NEWTRUE] = ARG_FIXED,
    [OP_NEWFALSE] = ARG_FIXED,
    [OP_MEMOIZE] = ARG_FIXED,
    [OP_PROTO] = ARG_FIXED + 1,
    [OP_BININT1] = ARG_FIXED + 1,
    [OP_BINPUT] = ARG_FIXED + 1,
    [OP_BINGET] = ARG_GET + ARG_FIXED + 1,
    [OP_BININT2] = ARG_FIXED + 2,
    [OP_BININT] = ARG_FIXED + 4,
    [OP_LONG_BINPUT] = ARG_FIXED + 4,
    [OP_LONG_BINGET] = ARG_GET + ARG_FIXED + 4,
    [OP_FRAME] = ARG_FIXED + 8,
    [OP_BINFLOAT] = ARG_FIXED + 8,
    [OP_LONG1] = ARG_PREFIXED + 1,
    [OP_SHORT_BINUNICODE] = ARG_PREFIXED + 1,
    [OP_SHORT_BINBYTES] = ARG_PREFIXED + 1,
    [OP_BINUNICODE] = ARG_PREFIXED + 4,
    [OP_BINBYTES] = ARG_PREFIXED + 4,
    [OP_BINUNICODE8] = ARG_PREFIXED + 8,
};

/* One opcode of the scan (pkl_scan_feed): h holds it and its fixed
 * argument or length bytes, at the input's byte at. */
static inline coop_status scan_op(pkl_scan *s, const unsigned char *h, uint64_t at)
{
    unsigned arg = argument_of[h[0]];
    size_t n = arg & 0xf;
    s->ops++;
    if (arg & ARG_PREFIXED)
        s->skip = little_endian(h + 1, n);
    if (arg & ARG_GET) {
        uint64_t index = little_endian(h + 1, n);
        if (index < s->ops) {
            size_t byte = (size_t)(index / 8), had = s->fetched_cap;
            if (byte >= had) {
                if (GROW_ARRAY(s->fetched, s->fetched_cap, byte + 1, 4096))
                    return coop_set_error(COOP_ERR_HOST_NOMEM,
                                          "%s: byte %llu: out of memory (scanning the memo)",
                                          s->path, (unsigned long long)at);
                memset(s->fetched + had, 0, s->fetched_cap - had);
            }
            s->fetched[byte] |= (unsigned char)(1u << (index % 8));
        }
    }
    return COOP_OK;
}

/* The memo entries the file's BINGETs fetch (s->fetched), read opcode by
 * opcode as step() will, up to STOP or to what step() will refuse (a
 * truncated argument, an opcode it does not run): the parse fails there, so
 * nothing after it matters (a file whose first byte is no PROTO is not
 * scanned at all). A fetch of an entry past the opcodes read so far fails in
 * memo_get too (the memo is no longer than that), which bounds the bitmap to
 * an eighth of a byte per opcode. An opcode and its argument's first bytes
 * may be split between pieces: they wait in s->head. */
coop_status pkl_scan_feed(pkl_scan *s, const unsigned char *p, size_t n)
{
    uint64_t base = s->len;
    if (base == 0 && n && p[0] != OP_PROTO)
        s->ended = 1;
    s->len += n;
    coop_status st = COOP_OK;
    for (size_t i = 0; i < n && !s->ended && st == COOP_OK;) {
        if (s->skip) {
            size_t k = s->skip < n - i ? (size_t)s->skip : n - i;
            i += k;
            s->skip -= k;
            continue;
        }
        if (!s->head_len) {
            unsigned arg = argument_of[p[i]];
            size_t h = 1 + (arg & 0xf);
            if (!arg) {
                s->ended = 1;
                break;
            }
            if (n - i >= h) { /* the whole opcode in this piece */
                st = scan_op(s, p + i, base + i);
                i += h;
                continue;
            }
            s->head_need = (unsigned char)h;
            s->head_at = base + i;
        }
        size_t want = (size_t)s->head_need - s->head_len;
        size_t k = want < n - i ? want : n - i;
        memcpy(s->head + s->head_len, p + i, k);
        s->head_len = (unsigned char)(s->head_len + k);
        i += k;
        if (s->head_len == s->head_need) {
            st = scan_op(s, s->head, s->head_at);
            s->head_len = 0;
        }
    }
    return st;
}

void pkl_scan_free(pkl_scan *s)
{
    free(s->fetched);
    s->fetched = NULL;
    s->fetched_cap = 0;
}

size_t pkl_stream_window = (size_t)1 << 20;

/* The parse proper, from m's first byte (at m->win), for the machine set up
 * by pkl_parse_sealed or pkl_parse_stream; frees what the machine holds and
 * on failure the arena. */
static coop_status run(machine *m, coop_status st, const pkl_value **root)
{
    const char *path = m->path;
    if (st == COOP_OK && (m->len == 0 || m->win[0] != OP_PROTO))
        st = coop_set_error(COOP_ERR_INVALID,
                            "%s: byte 0: not a pickle of protocol 2 or later (first byte %s)", path,
                            m->len ? "is not 0x80" : "missing: empty file");
    if (st == COOP_OK && m->read_keys) {
        size_t n = 0;
        while (m->read_keys[n])
            n++;
        if (!(m->read_key_lens = malloc((n ? n : 1) * sizeof *m->read_key_lens)))
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: byte 0: out of memory", path);
        for (size_t i = 0; st == COOP_OK && i < n; i++)
            m->read_key_lens[i] = strlen(m->read_keys[i]);
    }
    int done = 0;
    while (st == COOP_OK && !done) {
        if (m->pos >= m->len) {
            st = coop_set_error(COOP_ERR_INVALID,
                                "%s: byte %zu: truncated: the pickle ends without STOP", path,
                                m->len);
            break;
        }
        if ((st = need(m, 1)) != COOP_OK)
            break;
        m->op_at = m->pos;
        m->op = m->win[m->pos++ - m->win_at];
        m->ops++;
        st = step(m, &done);
    }
    if (st == COOP_OK)
        *root = m->stack[0];
    else
        pkl_arena_free(m->arena);
    free(m->stack);
    free(m->marks);
    free(m->memo);
    free(m->fetched);
    free(m->read_key_lens);
    free(m->wbuf);
    return st;
}

/* A machine for an input of len bytes, before its bytes are given (whole,
 * or through a window): what pkl_parse_sealed and pkl_parse_stream share. */
static machine new_machine(const char *path, size_t len, const char *const *read_keys,
                           pkl_seal_fn seal, void *seal_ctx, pkl_arena *arena)
{
    return (machine){.path = path,
                     .len = len,
                     .arena = arena,
                     .read_keys = read_keys,
                     .seal = read_keys ? seal : NULL,
                     .seal_ctx = seal_ctx,
                     .memory_limit = len > (SIZE_MAX - PKL_MEMORY_BASE) / PKL_MEMORY_PER_BYTE
                                         ? SIZE_MAX
                                         : len * PKL_MEMORY_PER_BYTE + PKL_MEMORY_BASE};
}

coop_status pkl_parse(const char *path, const unsigned char *data, size_t len, pkl_arena *arena,
                      const pkl_value **root)
{
    return pkl_parse_pruned(path, data, len, NULL, arena, root);
}

coop_status pkl_parse_pruned(const char *path, const unsigned char *data, size_t len,
                             const char *const *read_keys, pkl_arena *arena, const pkl_value **root)
{
    return pkl_parse_sealed(path, data, len, read_keys, NULL, NULL, arena, root);
}

coop_status pkl_parse_sealed(const char *path, const unsigned char *data, size_t len,
                             const char *const *read_keys, pkl_seal_fn seal, void *seal_ctx,
                             pkl_arena *arena, const pkl_value **root)
{
    *root = NULL;
    machine m = new_machine(path, len, read_keys, seal, seal_ctx, arena);
    m.win = data;
    m.win_end = len;
    coop_status st = COOP_OK;
    if (read_keys && len && data[0] == OP_PROTO) { /* else run() refuses it at byte 0 */
        pkl_scan scan = {.path = path};
        st = pkl_scan_feed(&scan, data, len);
        m.fetched = scan.fetched;
        m.fetched_cap = scan.fetched_cap;
    }
    return run(&m, st, root);
}

coop_status pkl_parse_stream(const char *path, pkl_scan *scan, pkl_read_fn read, void *read_ctx,
                             const char *const *read_keys, pkl_seal_fn seal, void *seal_ctx,
                             pkl_arena *arena, const pkl_value **root)
{
    *root = NULL;
    machine m = new_machine(path, (size_t)scan->len, read_keys, seal, seal_ctx, arena);
    m.read_fn = read;
    m.read_ctx = read_ctx;
    if (read_keys) { /* the bitmap is the machine's now */
        m.fetched = scan->fetched;
        m.fetched_cap = scan->fetched_cap;
        scan->fetched = NULL;
        scan->fetched_cap = 0;
    }
    m.wcap = pkl_stream_window > 256 ? pkl_stream_window : 256; /* LONG1 takes up to 255 */
    coop_status st = COOP_OK;
    if (!(m.wbuf = malloc(m.wcap)))
        st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: byte 0: out of memory", path);
    m.win = m.wbuf;
    if (st == COOP_OK && m.len)
        st = need(&m, 1);
    return run(&m, st, root);
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

int pkl_str_eq(const pkl_value *v, const char *s)
{
    return pkl_str_eq_len(v, s, strlen(s));
}

const pkl_value *pkl_dict_get(const pkl_value *dict, const char *key)
{
    if (!dict || dict->kind != PKL_DICT || dict->sealed)
        return NULL;
    for (size_t i = dict->v.seq.len; i >= 2; i -= 2)
        if (pkl_str_eq(dict->v.seq.items[i - 2], key))
            return dict->v.seq.items[i - 1];
    return NULL;
}

const char *pkl_type_name(const pkl_value *v)
{
    static const char *const names[] = {
        [PKL_NONE] = "None",   [PKL_BOOL] = "bool",   [PKL_INT] = "int",
        [PKL_FLOAT] = "float", [PKL_STR] = "str",     [PKL_BYTES] = "bytes",
        [PKL_LIST] = "list",   [PKL_TUPLE] = "tuple", [PKL_DICT] = "dict",
    };
    return v ? names[v->kind] : "nothing";
}
