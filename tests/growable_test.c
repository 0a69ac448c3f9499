/* Growable arrays (growable.h): doubling from the first capacity or from the
 * current one, nothing done when there is room, the items kept across a
 * move, and a capacity or byte size that would wrap refused with the array
 * and its capacity untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <malloc.h>

#include "growable.h"

/* An item bigger than a pointer, so that a wrong item size shows. */
typedef struct wide_item {
    uint64_t a, b, c;
} wide_item;

/* The allocation behind arr holds at least cap items (malloc_usable_size
 * may round up, never down). */
#define assert_holds(arr, cap) assert_true(malloc_usable_size(arr) >= (cap) * sizeof *(arr))

static void grows_from_zero_to_the_first_capacity(void **state)
{
    (void)state;
    wide_item *arr = NULL;
    size_t cap = 0;
    assert_int_equal(GROW_ARRAY(arr, cap, 1, 64), 0);
    assert_non_null(arr);
    assert_int_equal(cap, 64);
    assert_holds(arr, cap);
    for (size_t i = 0; i < cap; i++) /* every item writable (ASan checks the bounds) */
        arr[i] = (wide_item){i, i + 1, i + 2};
    free(arr);

    /* a first need above the first capacity: doubled from it until it fits */
    arr = NULL;
    cap = 0;
    assert_int_equal(GROW_ARRAY(arr, cap, 1000, 64), 0);
    assert_int_equal(cap, 1024);
    assert_holds(arr, cap);
    free(arr);

    /* no first capacity: doubled from 1 */
    arr = NULL;
    cap = 0;
    assert_int_equal(GROW_ARRAY(arr, cap, 3, 0), 0);
    assert_int_equal(cap, 4);
    free(arr);
}

static void doubles_from_the_current_capacity_keeping_the_items(void **state)
{
    (void)state;
    size_t cap = 100;
    uint32_t *arr = malloc(cap * sizeof *arr);
    assert_non_null(arr);
    for (uint32_t i = 0; i < cap; i++)
        arr[i] = i * 7;
    assert_int_equal(GROW_ARRAY(arr, cap, 101, 64), 0); /* the first capacity plays no part */
    assert_int_equal(cap, 200);
    assert_int_equal(GROW_ARRAY(arr, cap, 801, 64), 0);
    assert_int_equal(cap, 1600);
    assert_holds(arr, cap);
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(arr[i], i * 7);
    free(arr);
}

static void does_nothing_when_there_is_room(void **state)
{
    (void)state;
    size_t cap = 64;
    uint16_t *arr = malloc(cap * sizeof *arr);
    assert_non_null(arr);
    uint16_t *before = arr;
    assert_int_equal(GROW_ARRAY(arr, cap, 64, 1024), 0);
    assert_int_equal(GROW_ARRAY(arr, cap, 1, 1024), 0);
    assert_ptr_equal(arr, before);
    assert_int_equal(cap, 64);
    free(arr);

    /* an empty array asked for nothing stays unallocated */
    uint16_t *none = NULL;
    size_t none_cap = 0;
    assert_int_equal(GROW_ARRAY(none, none_cap, 0, 64), 0);
    assert_null(none);
    assert_int_equal(none_cap, 0);
}

/* Each refusal happens before realloc: arr, cap and the items stay. */
static void refuses_sizes_that_would_wrap(void **state)
{
    (void)state;
    size_t cap = 64;
    uint64_t *arr = malloc(cap * sizeof *arr);
    assert_non_null(arr);
    arr[63] = 42;
    uint64_t *before = arr;

    /* the capacity fits (2^63 on 64-bit) but not its size in bytes */
    assert_int_equal(GROW_ARRAY(arr, cap, SIZE_MAX / 2, 64), -1);
    assert_ptr_equal(arr, before);
    assert_int_equal(cap, 64);
    assert_int_equal(arr[63], 42); /* not freed: realloc never saw the wrapped size */

    /* doubling past SIZE_MAX / 2 would wrap the capacity itself */
    assert_int_equal(GROW_ARRAY(arr, cap, SIZE_MAX, 64), -1);
    assert_ptr_equal(arr, before);
    assert_int_equal(cap, 64);
    assert_int_equal(arr[63], 42);

    /* the same with one-byte items, where only the doubling can wrap */
    unsigned char *bytes = NULL;
    size_t bytes_cap = 0;
    assert_int_equal(GROW_ARRAY(bytes, bytes_cap, SIZE_MAX / 2 + 2, 64), -1);
    assert_null(bytes);
    assert_int_equal(bytes_cap, 0);
    free(bytes); /* NULL; freed all the same for the analyzers' sake */
    free(arr);
}

/* The capacity arithmetic alone, at the edges of size_t. */
static void capacity_stops_at_the_edges(void **state)
{
    (void)state;
    size_t n = 0;
    assert_true(grow_array_capacity(3, 10, 64, 1, &n));
    assert_int_equal(n, 12);
    assert_true(grow_array_capacity(0, 10, 64, 1, &n));
    assert_int_equal(n, 64);
    size_t top = (SIZE_MAX >> 1) + 1; /* the largest power of two */
    assert_true(grow_array_capacity(top / 2, top, 64, 1, &n));
    assert_int_equal(n, top);
    n = 7;
    assert_false(grow_array_capacity(top, top + 1, 64, 1, &n)); /* top * 2 wraps to 0 */
    assert_false(grow_array_capacity(top / 2, top, 64, 2, &n)); /* top * 2 bytes wraps */
    assert_int_equal(n, 7);                                     /* untouched on refusal */
    /* the largest capacity that can double, SIZE_MAX / 2 (not a power of two), doubles */
    assert_true(grow_array_capacity(SIZE_MAX / 2, SIZE_MAX / 2 + 1, 64, 1, &n));
    assert_int_equal(n, SIZE_MAX - 1);
    /* a first capacity of exactly SIZE_MAX bytes of items fits */
    assert_true(grow_array_capacity(0, 1, SIZE_MAX / 3, 3, &n));
    assert_int_equal(n, SIZE_MAX / 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grows_from_zero_to_the_first_capacity),
        cmocka_unit_test(doubles_from_the_current_capacity_keeping_the_items),
        cmocka_unit_test(does_nothing_when_there_is_room),
        cmocka_unit_test(refuses_sizes_that_would_wrap),
        cmocka_unit_test(capacity_stops_at_the_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
