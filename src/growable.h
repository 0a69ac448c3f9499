/* Growable arrays: a malloc'ed array of items and its capacity in items,
 * grown by doubling.
 *
 * GROW_ARRAY(arr, cap, need, first) makes room for at least need items in
 * arr (an lvalue of type T *, NULL or malloc'ed) whose capacity is cap (an
 * lvalue of type size_t): nothing happens when cap >= need; otherwise the
 * capacity doubles from cap (from first when cap is 0) until it holds need,
 * and arr is realloc'ed to it. Evaluates to 0, or to -1 when the host is out
 * of memory or the new capacity or its size in bytes would not fit in a
 * size_t; on failure arr and cap are as they were (arr still valid and owned
 * by the caller). Each caller keeps its own first capacity: the allocation
 * pattern is part of what benchmarks measure.
 *
 * Why the pointer goes through memcpy and not through a `void **`: storing a
 * void * through (void **)&arr writes an object of type T * as a void *, two
 * types that are not compatible, which C11 6.5p7 leaves undefined (and which
 * made gcc -fanalyzer lose track of the buffers). memcpy may copy any
 * object's bytes; this relies only on T * and void * having one
 * representation, as on every platform coop builds for. */
#ifndef COOP_GROWABLE_H
#define COOP_GROWABLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The capacity GROW_ARRAY grows cap to for need items of item_size bytes
 * (cap < need): cap (first when 0, 1 when first is 0 too) doubled until it
 * holds need. false when a doubling or the size in bytes would wrap. */
static inline bool grow_array_capacity(size_t cap, size_t need, size_t first, size_t item_size,
                                       size_t *out)
{
    size_t n = cap ? cap : first ? first : 1;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return false;
        n *= 2;
    }
    if (item_size && n > SIZE_MAX / item_size)
        return false;
    *out = n;
    return true;
}

/* GROW_ARRAY without the types: arrayp is the address of the caller's
 * pointer (of any object pointer type), item_size its items' size. */
static inline int grow_array_to(void *arrayp, size_t *cap, size_t need, size_t first,
                                size_t item_size)
{
    if (need <= *cap)
        return 0;
    size_t n;
    if (!grow_array_capacity(*cap, need, first, item_size, &n))
        return -1;
    void *items;
    memcpy(&items, arrayp, sizeof items);
    void *grown = realloc(items, n * item_size);
    if (!grown)
        return -1;
    /* copied from a second local: gcc 12's -fanalyzer, on the path where
     * realloc grows in place, reports memcpy from &grown itself as reading
     * an uninitialized value (a false positive) */
    void *out = grown;
    memcpy(arrayp, &out, sizeof out);
    *cap = n;
    return 0;
}

/* &arr as a void *, refusing at compile time an arr that is not
 * pointer-sized (an array's address would compile, and be realloc'ed). */
#define GROW_ARRAY_ADDRESS(arr)                                                                    \
    ((void)sizeof(struct {                                                                         \
         _Static_assert(sizeof(arr) == sizeof(void *), "GROW_ARRAY: arr must be a pointer");       \
         int unused;                                                                               \
     }),                                                                                           \
     (void *)&(arr))

/* The item size comes from arr's type; cap must be a size_t (grow_array_to's
 * size_t * parameter refuses the address of another integer type). arr and
 * cap are evaluated once. */
#define GROW_ARRAY(arr, cap, need, first)                                                          \
    grow_array_to(GROW_ARRAY_ADDRESS(arr), &(cap), (need), (first), sizeof *(arr))

#endif
