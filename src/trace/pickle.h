/*
 * A safe subset of Python's pickle format: just enough to load what
 * torch.cuda.memory._dump_snapshot() writes (protocol 2 to 5 pickles of
 * dicts, lists, tuples, strings, bytes, ints, floats, bools and None, with a
 * memo). Every opcode that would import or call anything (GLOBAL,
 * STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID,
 * BINPERSID, EXT1/2/4) is refused, as is every opcode such files do not use.
 *
 * The result is a tree of pkl_value nodes held in one arena (pkl_parse_pruned
 * leaves out what its caller says it never reads). Strings are copies (not
 * NUL-terminated) in the arena, so the input may be freed once the parse
 * returns. Memory is linear in the input: each node comes from one opcode, memo
 * indices are bounded by the opcodes read so far, the whole is bounded at
 * PKL_MEMORY_PER_BYTE per input byte, and nothing recurses (a
 * memo can make a list contain itself; consumers walk fixed paths only).
 * A memo also lets a 2-byte BINGET repeat a container of any size, so a
 * consumer that walks containers bounds its work by refusing shared ones
 * (pkl_value.shared) or by limiting what it looks up in each.
 */
#ifndef COOP_TRACE_PICKLE_H
#define COOP_TRACE_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "coop.h"

typedef enum pkl_kind {
    PKL_NONE = 0,
    PKL_BOOL,
    PKL_INT,
    PKL_FLOAT,
    PKL_STR,
    PKL_BYTES,
    PKL_LIST,
    PKL_TUPLE,
    PKL_DICT
} pkl_kind;

typedef struct pkl_value pkl_value;
struct pkl_value {
    uint8_t kind;   /* pkl_kind */
    uint8_t big;    /* PKL_INT: the value is v.u, at least 2^63 */
    uint8_t shared; /* pushed again from the memo (BINGET): one node, several places */
    uint8_t pinned; /* pkl_parse_pruned: in a memo entry some BINGET of the file fetches */
    uint8_t pruned; /* a list, tuple or dict whose items were dropped (pkl_parse_pruned) */
    uint8_t sealed; /* a dict its consumer summarized (pkl_parse_sealed): read v.summary */
    uint16_t tag;   /* with v.summary, the consumer's (sealed == 1) */
    size_t offset;  /* byte offset of the opcode that created the value */
    union {
        int64_t i;  /* PKL_INT (big == 0), PKL_BOOL (0 or 1) */
        uint64_t u; /* PKL_INT with big == 1 */
        double f;
        struct {
            const char *ptr;
            size_t len;
        } str; /* PKL_STR (UTF-8, unchecked), PKL_BYTES */
        struct {
            pkl_value **items;
            size_t len, cap;
        } seq;               /* PKL_LIST, PKL_TUPLE; PKL_DICT: key, value, key, value... */
        uint64_t summary[4]; /* a sealed dict: what its consumer kept (pkl_seal_fn) */
    } v;
};

/* The summary fills the bytes a node takes anyway (the arena rounds to 16). */
_Static_assert(sizeof(pkl_value) <= 48, "a summary must not make nodes larger");

typedef struct pkl_chunk pkl_chunk;

/* Free lists of item arrays, by capacity: 4 << k items for list k. */
#define PKL_ARRAY_CLASSES 40

/* Owns every node of one parse. */
typedef struct pkl_arena {
    pkl_chunk *chunks;
    size_t bytes;                         /* held in chunks, for the parse's memory bound */
    void *free_nodes;                     /* nodes of pruned items, for reuse */
    void *free_arrays[PKL_ARRAY_CLASSES]; /* item arrays pruned or outgrown, for reuse */
    /* Copies of the input's strings and bytes, 16 << k bytes for a string
     * of class k, outside the bound (at most 16 bytes per 3 input bytes, a
     * 1-byte SHORT_BINUNICODE each; in practice a few: PyTorch memoizes its
     * repeated strings, and pruned ones are reused): */
    pkl_chunk *str_chunks;
    size_t str_bytes;
    void *free_strs[PKL_ARRAY_CLASSES]; /* copies of pruned strings, for reuse */
} pkl_arena;

/* The parse's memory bound: PKL_MEMORY_PER_BYTE bytes per input byte plus
 * PKL_MEMORY_BASE, nodes and the machine's stack and memo together
 * (pkl_parse_pruned also holds a bitmap of the memo, a quarter byte per input
 * byte at most, outside the bound: it never needs more of the bound than
 * pkl_parse). PyTorch's
 * snapshots need 3.5 to 9 bytes per byte (9 without frames); a pickle of
 * 1-byte opcodes that each make a node needs about 56. */
#define PKL_MEMORY_PER_BYTE 24
#define PKL_MEMORY_BASE ((size_t)64 << 20)

/* Parses data[0..len) (decompressed pickle bytes). On success *root is the
 * unpickled object and the arena owns the tree; on failure the arena holds
 * nothing, and the message is "PATH: byte OFFSET: what" (among the failures:
 * a parse that would need more memory than its bound). Bytes after STOP are
 * ignored, as Python's pickle.load does. */
coop_status pkl_parse(const char *path, const unsigned char *data, size_t len, pkl_arena *arena,
                      const pkl_value **root);

/* pkl_parse for a consumer that reads dicts only through pkl_dict_get with
 * the keys in read_keys (NULL-terminated), and from other values at most
 * their kind: a list, tuple or dict set in a dict under any other str key is
 * pruned (its items dropped, its node kept with its kind, offset and
 * pruned = 1) once nothing else can reach it. "Nothing else" is exact, not a
 * guess: the file is scanned first for the memo entries its BINGETs fetch,
 * and a value (or any value inside it) put in one of those stays whole. So
 * the result differs from pkl_parse's only in what the consumer never reads:
 * a snapshot's per-entry stack frames, most of its memory. Memory freed so is
 * reused by the parse and not counted again against its bound. */
coop_status pkl_parse_pruned(const char *path, const unsigned char *data, size_t len,
                             const char *const *read_keys, pkl_arena *arena,
                             const pkl_value **root);

/* A consumer's summary of a dict that nothing can change or fetch any more:
 * a dict no BINGET of the file fetches, just put in a list by APPEND or
 * APPENDS (so off the stack, with that list its one parent). It may read the
 * dict (whole, with pkl_dict_get) and return 1 having written what it will
 * later read of it in summary and *tag; pkl_parse_sealed then drops the
 * dict's items and every node below them no BINGET fetches, and sets sealed,
 * v.summary and tag (the node keeps its kind, offset and flags). Returning 0
 * leaves the dict whole. */
typedef int (*pkl_seal_fn)(void *ctx, const pkl_value *dict, uint64_t summary[4], uint16_t *tag);

/* pkl_parse_pruned that also offers each dict put in a list to seal (see
 * pkl_seal_fn): a snapshot's trace entries, each a dict with an item array
 * and its int nodes, become one node each. pkl_dict_get finds nothing in a
 * sealed dict: the consumer reads its summary instead. Sealing needs the
 * pruned parse's scan of the memo: with seal NULL this is pkl_parse_pruned,
 * with read_keys NULL pkl_parse. */
coop_status pkl_parse_sealed(const char *path, const unsigned char *data, size_t len,
                             const char *const *read_keys, pkl_seal_fn seal, void *seal_ctx,
                             pkl_arena *arena, const pkl_value **root);

/* A parse of an input not held whole (a large file read twice): its first
 * pass, fed the input's bytes in pieces of any size, in order, counts them
 * (len) and collects what pkl_parse_pruned scans for before it parses (the
 * memo entries the BINGETs fetch). Zero it but for path, feed it, then give
 * it to pkl_parse_stream; pkl_scan_free frees it either way. */
typedef struct pkl_scan {
    const char *path;      /* for messages */
    uint64_t len;          /* bytes fed */
    uint64_t skip;         /* bytes of the current opcode's string still to pass */
    uint64_t head_at;      /* offset of the opcode in head */
    size_t ops;            /* opcodes scanned */
    unsigned char head[9]; /* an opcode and its argument (or length) bytes, split between pieces */
    unsigned char head_len, head_need;
    int ended; /* past what the parse will refuse: the rest is counted only */
    unsigned char *fetched;
    size_t fetched_cap;
} pkl_scan;

/* Feeds the input's next n bytes. Errors: "PATH: byte N: out of memory
 * (scanning the memo)". */
coop_status pkl_scan_feed(pkl_scan *s, const unsigned char *p, size_t n);

void pkl_scan_free(pkl_scan *s);

/* Reads the input's next bytes (the same bytes as the scan's, from the
 * first) into buf[0..cap), *got of them (0 only at the end); errors its own. */
typedef coop_status (*pkl_read_fn)(void *ctx, unsigned char *buf, size_t cap, size_t *got);

/* The bytes of input pkl_parse_stream holds at a time (its window; at least
 * 256 are used): 1 MiB. For tests, which make it small; set it while no
 * parse runs. */
extern size_t pkl_stream_window;

/* pkl_parse_sealed of the input that scan was fed, read again through read
 * (second pass) into a window of pkl_stream_window bytes: the same result,
 * messages and byte offsets (the length and the memory bound are the
 * scan's), and besides "PATH: byte N: the file changed while it was read:
 * L bytes the first time, N the second" when read ends early. The tree's
 * strings are copies, so only the window is held of the input. */
coop_status pkl_parse_stream(const char *path, pkl_scan *scan, pkl_read_fn read, void *read_ctx,
                             const char *const *read_keys, pkl_seal_fn seal, void *seal_ctx,
                             pkl_arena *arena, const pkl_value **root);

/* Frees every node; the arena is empty (reusable) afterwards. */
void pkl_arena_free(pkl_arena *arena);

/* The value for a string key in a dict (the last one if repeated, as in
 * Python), or NULL if absent, dict is not a dict, or dict is sealed. */
const pkl_value *pkl_dict_get(const pkl_value *dict, const char *key);

/* Whether v is a str equal to s. */
int pkl_str_eq(const pkl_value *v, const char *s);

/* pkl_str_eq for an s of known length len: for comparisons in a loop over
 * every key of a file, where strlen would be most of the work. */
static inline int pkl_str_eq_len(const pkl_value *v, const char *s, size_t len)
{
    return v && v->kind == PKL_STR && v->v.str.len == len && memcmp(v->v.str.ptr, s, len) == 0;
}

/* Python's name of the value's type ("dict", "int", ...), for messages. */
const char *pkl_type_name(const pkl_value *v);

/* Python's name of a pickle opcode byte ("GLOBAL", ...) or NULL if the byte
 * is no opcode. */
const char *pkl_opcode_name(unsigned char op);

#endif
