/*
 * Interning of names (tensor names, op names) to dense ids, in order of first
 * appearance. Open addressing with linear probing; the table owns copies of
 * the strings and hands them over with name_table_take_names().
 */
#ifndef COOP_TRACE_NAME_TABLE_H
#define COOP_TRACE_NAME_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct name_table {
    char **names; /* by id */
    uint32_t count;
    size_t names_cap;
    uint32_t *slots;  /* id + 1, 0 = empty */
    size_t num_slots; /* power of two; size_t: 2^30 names need 2^31 slots,
                       * whose doubling wrapped a uint32_t to 0 */
    uint64_t seed;    /* the hash's key, drawn when slots are first made
                       * (unless set before: tests) */
} name_table;

/* At most this many names (ids 0 .. NAME_TABLE_MAX - 1; slots hold id + 1). */
#define NAME_TABLE_MAX (UINT32_MAX - 1)

/* Returns 0 and sets *id (new or existing); -1 when host memory runs out;
 * NAME_TABLE_FULL for a new name when NAME_TABLE_MAX names are held. */
#define NAME_TABLE_FULL (-2)
int name_table_intern(name_table *t, const char *name, uint32_t *id);

/* Looks a name up without adding it: 0 and *id when found, -1 otherwise. */
int name_table_find(const name_table *t, const char *name, uint32_t *id);

/* Moves the names array out (caller frees each and the array); the table is
 * left empty. */
char **name_table_take_names(name_table *t, uint32_t *count);

void name_table_free(name_table *t);

#endif
