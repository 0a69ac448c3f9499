/* Free index: per-stream treaps keyed by (size, address); see free_index.h. */
#include "free_index.h"
#include "status.h"

/* ---- Keys and priorities ---- */

/* Strict order on (size, addr); addresses are unique, so keys are too. */
static inline bool key_less(uint64_t size_a, uintptr_t addr_a, uint64_t size_b, uintptr_t addr_b)
{
    return size_a < size_b || (size_a == size_b && addr_a < addr_b);
}

/* Priority from the address (Fibonacci hashing; block addresses are 512-aligned
 * so the low bits carry nothing). Max-heap on priority. */
static inline uint64_t priority(uintptr_t addr)
{
    return ((uint64_t)addr >> 9) * UINT64_C(0x9E3779B97F4A7C15);
}

/* ---- Sets ---- */

static free_index_set *find_set(const free_index *fi, coop_stream stream)
{
    for (size_t i = 0; i < fi->num_sets; i++)
        if (fi->sets[i].stream == stream)
            return &fi->sets[i];
    return NULL;
}

void free_index_init(free_index *fi, coop_stream any_tag, meta_heap *heap)
{
    fi->sets = NULL;
    fi->num_sets = fi->cap_sets = 0;
    fi->count = 0;
    fi->any = any_tag;
    fi->heap = heap;
}

void free_index_fini(free_index *fi)
{
    meta_free(fi->heap, fi->sets, fi->cap_sets * sizeof *fi->sets);
    fi->sets = NULL;
    fi->num_sets = fi->cap_sets = 0;
}

coop_status free_index_reserve(free_index *fi, coop_stream stream)
{
    if (find_set(fi, stream))
        return COOP_OK;
    if (fi->num_sets == fi->cap_sets) {
        size_t cap = fi->cap_sets ? 2 * fi->cap_sets : 4;
        free_index_set *sets = meta_alloc(fi->heap, cap * sizeof *sets);
        if (!sets)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a free-index set");
        for (size_t i = 0; i < fi->num_sets; i++)
            sets[i] = fi->sets[i];
        meta_free(fi->heap, fi->sets, fi->cap_sets * sizeof *fi->sets);
        fi->sets = sets;
        fi->cap_sets = cap;
    }
    fi->sets[fi->num_sets++] = (free_index_set){.stream = stream, .root = NULL, .count = 0};
    return COOP_OK;
}

/* ---- Treap operations ---- */

static free_index_node *rotate_right(free_index_node *n)
{
    free_index_node *l = n->left;
    n->left = l->right;
    l->right = n;
    return l;
}

static free_index_node *rotate_left(free_index_node *n)
{
    free_index_node *r = n->right;
    n->right = r->left;
    r->left = n;
    return r;
}

/* Recursive insert: depth is O(log n) expected, so the stack stays shallow. */
static free_index_node *treap_insert(free_index_node *root, free_index_node *node)
{
    if (!root)
        return node;
    if (key_less(node->size, node->addr, root->size, root->addr)) {
        root->left = treap_insert(root->left, node);
        if (priority(root->left->addr) > priority(root->addr))
            root = rotate_right(root);
    } else {
        root->right = treap_insert(root->right, node);
        if (priority(root->right->addr) > priority(root->addr))
            root = rotate_left(root);
    }
    return root;
}

/* Joins two treaps where every key of a is below every key of b. */
static free_index_node *treap_join(free_index_node *a, free_index_node *b)
{
    free_index_node *root = NULL, **link = &root;
    while (a && b) {
        if (priority(a->addr) > priority(b->addr)) {
            *link = a;
            link = &a->right;
            a = a->right;
        } else {
            *link = b;
            link = &b->left;
            b = b->left;
        }
    }
    *link = a ? a : b;
    return root;
}

void free_index_insert(free_index *fi, free_index_node *node, uint64_t size, uintptr_t addr,
                       coop_stream stream)
{
    free_index_set *set = find_set(fi, stream);
    node->left = node->right = NULL;
    node->size = size;
    node->addr = addr;
    node->stream = stream;
    set->root = treap_insert(set->root, node);
    set->count++;
    fi->count++;
}

void free_index_remove(free_index *fi, free_index_node *node)
{
    free_index_set *set = find_set(fi, node->stream);
    free_index_node **link = &set->root;
    while (*link != node)
        link = key_less(node->size, node->addr, (*link)->size, (*link)->addr) ? &(*link)->left
                                                                              : &(*link)->right;
    *link = treap_join(node->left, node->right);
    node->left = node->right = NULL;
    set->count--;
    fi->count--;
}

/* Smallest node with size >= size in one treap. */
static free_index_node *lower_bound(free_index_node *n, uint64_t size)
{
    free_index_node *best = NULL;
    while (n) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

free_index_node *free_index_best_fit(const free_index *fi, uint64_t size, coop_stream stream)
{
    free_index_node *best = NULL;
    for (size_t i = 0; i < fi->num_sets; i++) {
        const free_index_set *set = &fi->sets[i];
        if (set->stream != stream && set->stream != fi->any)
            continue;
        free_index_node *n = lower_bound(set->root, size);
        if (n && (!best || key_less(n->size, n->addr, best->size, best->addr)))
            best = n;
    }
    return best;
}

free_index_node *free_index_first(const free_index *fi, coop_stream stream)
{
    free_index_set *set = find_set(fi, stream);
    free_index_node *n = set ? set->root : NULL;
    while (n && n->left)
        n = n->left;
    return n;
}

free_index_node *free_index_max(const free_index *fi)
{
    free_index_node *best = NULL;
    for (size_t i = 0; i < fi->num_sets; i++) {
        free_index_node *n = fi->sets[i].root;
        while (n && n->right)
            n = n->right;
        if (n && (!best || key_less(best->size, best->addr, n->size, n->addr)))
            best = n;
    }
    return best;
}

bool free_index_contains(const free_index *fi, const free_index_node *node)
{
    const free_index_set *set = find_set(fi, node->stream);
    const free_index_node *n = set ? set->root : NULL;
    while (n && n != node)
        n = key_less(node->size, node->addr, n->size, n->addr) ? n->left : n->right;
    return n == node;
}

/* ---- Checking ---- */

/* Counts nodes of a subtree whose keys must lie in (lo, hi); returns SIZE_MAX
 * on an order or heap violation. Bounds are NULL when open. */
static size_t check_subtree(const free_index_node *n, const free_index_node *lo,
                            const free_index_node *hi, coop_stream stream, int depth)
{
    if (!n)
        return 0;
    if (depth > 10000 || n->stream != stream)
        return SIZE_MAX;
    if (lo && !key_less(lo->size, lo->addr, n->size, n->addr))
        return SIZE_MAX;
    if (hi && !key_less(n->size, n->addr, hi->size, hi->addr))
        return SIZE_MAX;
    if (n->left && priority(n->left->addr) > priority(n->addr))
        return SIZE_MAX;
    if (n->right && priority(n->right->addr) > priority(n->addr))
        return SIZE_MAX;
    size_t l = check_subtree(n->left, lo, n, stream, depth + 1);
    size_t r = check_subtree(n->right, n, hi, stream, depth + 1);
    if (l == SIZE_MAX || r == SIZE_MAX)
        return SIZE_MAX;
    return l + r + 1;
}

const char *free_index_check(const free_index *fi)
{
    size_t total = 0;
    for (size_t i = 0; i < fi->num_sets; i++) {
        for (size_t j = 0; j < i; j++)
            if (fi->sets[j].stream == fi->sets[i].stream)
                return "free index: two sets for one stream";
        size_t n = check_subtree(fi->sets[i].root, NULL, NULL, fi->sets[i].stream, 0);
        if (n == SIZE_MAX)
            return "free index: a set breaks key order, heap order or its stream tag";
        if (n != fi->sets[i].count)
            return "free index: a set's node count differs from its tree";
        total += n;
    }
    if (total != fi->count)
        return "free index: total count differs from the sets";
    return NULL;
}
