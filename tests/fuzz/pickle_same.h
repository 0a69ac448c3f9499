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

/* Whether pkl_parse_pruned may prune a container set in a dict under key:
 * a str key not in read_keys (NULL-terminated). */
static inline int pkl_key_unread(const pkl_value *key, const char *const *read_keys)
{
    if (key->kind != PKL_STR)
        return 0;
    for (; *read_keys; read_keys++)
        if (pkl_str_eq(key, *read_keys))
            return 0;
    return 1;
}

/* Whether b (pkl_parse_pruned with read_keys) agrees with a (pkl_parse of
 * the same bytes) on every node it keeps whole, and on the kind and offset of
 * those it pruned, each of which must be a dict's value under a key not in
 * read_keys (a pruned value the consumer reads is a difference); *pruned
 * counts them. Walks both in lockstep, at most 100,000 pairs (a memo can
 * make a list contain itself). */
static inline int pkl_same_but_pruned(const pkl_value *a, const pkl_value *b,
                                      const char *const *read_keys, int *pruned)
{
    enum { MAX_PENDING = 4096 };
    static const pkl_value *pending[2 * MAX_PENDING];
    static unsigned char may_prune[MAX_PENDING]; /* of each pending pair */
    size_t n = 0, visits = 0;
    may_prune[n / 2] = 0;
    pending[n++] = a;
    pending[n++] = b;
    *pruned = 0;
    while (n && visits++ < 100000) {
        b = pending[--n];
        a = pending[--n];
        int may = may_prune[n / 2];
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
            /* each parse holds its own copy of the input's strings */
            if (a->v.str.len != b->v.str.len ||
                memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) != 0)
                return 0;
            break;
        default:
            if (b->pruned) {
                if (!may)
                    return 0;
                (*pruned)++;
                break;
            }
            if (a->v.seq.len != b->v.seq.len)
                return 0;
            for (size_t i = 0; i < a->v.seq.len && n + 2 <= 2 * MAX_PENDING; i++) {
                may_prune[n / 2] = a->kind == PKL_DICT && i % 2 == 1 &&
                                   pkl_key_unread(a->v.seq.items[i - 1], read_keys);
                pending[n++] = a->v.seq.items[i];
                pending[n++] = b->v.seq.items[i];
            }
        }
    }
    return 1;
}

#endif
