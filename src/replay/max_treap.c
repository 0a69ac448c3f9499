/* Max-augmented split/merge treap; see max_treap.h. */
#include <stddef.h>

#include "replay/max_treap.h"

uint64_t max_treap_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void max_treap_node_init(max_treap_node *n, uint64_t weight, uint64_t priority)
{
    *n = (max_treap_node){.priority = priority, .weight = weight, .subtree_max = weight};
}

void max_treap_set_weight(max_treap_node *n, uint64_t weight)
{
    n->weight = weight;
    max_treap_update(n);
}

max_treap_node *max_treap_merge(max_treap_node *a, max_treap_node *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (a->priority > b->priority) {
        a->right = max_treap_merge(a->right, b);
        max_treap_update(a);
        return a;
    }
    b->left = max_treap_merge(a, b->left);
    max_treap_update(b);
    return b;
}

max_treap_node *max_treap_pop_first(max_treap_node **t)
{
    if (!*t)
        return NULL;
    if (!(*t)->left) {
        max_treap_node *first = *t;
        *t = first->right;
        first->right = NULL;
        max_treap_update(first);
        return first;
    }
    max_treap_node *first = max_treap_pop_first(&(*t)->left);
    max_treap_update(*t);
    return first;
}

max_treap_node *max_treap_pop_last(max_treap_node **t)
{
    if (!*t)
        return NULL;
    if (!(*t)->right) {
        max_treap_node *last = *t;
        *t = last->left;
        last->left = NULL;
        max_treap_update(last);
        return last;
    }
    max_treap_node *last = max_treap_pop_last(&(*t)->right);
    max_treap_update(*t);
    return last;
}
