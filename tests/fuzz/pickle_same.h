/*
 * The property that pkl_parse_pruned promises (src/trace/pickle.h): on the
 * same bytes it agrees with pkl_parse on everything it keeps. Shared by
 * tests/trace_pickle_test.c (a snapshot with frames, and its mutants) and the
 * pickle fuzzer (tests/fuzz/fuzz_pickle.c: any bytes).
 */
#ifndef COOP_TESTS_PICKLE_SAME_H
#define COOP_TESTS_PICKLE_SAME_H

#include <stddef.h>
#include <string.h>

#include "trace/pickle.h"

/* Whether b (pkl_parse_pruned) agrees with a (pkl_parse of the same bytes) on
 * every node it keeps whole, and on the kind and offset of those it pruned;
 * *pruned counts the latter. Walks both in lockstep, at most 100,000 pairs
 * (a memo can make a list contain itself). */
static inline int pkl_same_but_pruned(const pkl_value *a, const pkl_value *b, int *pruned)
{
    enum { MAX_PENDING = 4096 };
    static const pkl_value *pending[2 * MAX_PENDING];
    size_t n = 0, visits = 0;
    pending[n++] = a;
    pending[n++] = b;
    *pruned = 0;
    while (n && visits++ < 100000) {
        b = pending[--n];
        a = pending[--n];
        if (a->kind != b->kind || a->offset != b->offset || a->big != b->big ||
            a->shared != b->shared || a->pruned)
            return 0;
        switch (a->kind) {
        case PKL_NONE:
            break;
        case PKL_BOOL:
        case PKL_INT:
        case PKL_FLOAT:
            if (memcmp(&a->v.u, &b->v.u, sizeof a->v.u))
                return 0;
            break;
        case PKL_STR:
        case PKL_BYTES:
            if (a->v.str.ptr != b->v.str.ptr || a->v.str.len != b->v.str.len)
                return 0;
            break;
        default:
            if (b->pruned) {
                (*pruned)++;
                break;
            }
            if (a->v.seq.len != b->v.seq.len)
                return 0;
            for (size_t i = 0; i < a->v.seq.len && n + 2 <= 2 * MAX_PENDING; i++) {
                pending[n++] = a->v.seq.items[i];
                pending[n++] = b->v.seq.items[i];
            }
        }
    }
    return 1;
}

#endif
