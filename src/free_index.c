/* Free index: per-stream treaps keyed by (size, address); see free_index.h. */
#include "hot_path.h"
#include "free_index.h"
#include "status.h"

/* ---- Keys and priorities ---- */

/* Strict order on (size, addr); addresses are unique, so keys are too. */
static inline bool key_less(uint64_t size_a, uintptr_t addr_a, uint64_t size_b, uintptr_t addr_b)
{
    return size_a < size_b || (size_a == size_b && addr_a < addr_b);
}

/* Priority from the node's own address (Fibonacci hashing; records are
 * 64-byte aligned, so the low bits carry nothing). Max-heap on priority.
 * Hashing the node rather than its key means that comparing a child's
 * priority needs no load of the child. */
static inline uint64_t priority(const free_index_node *node)
{
    return ((uint64_t)(uintptr_t)node >> 6) * UINT64_C(0x9E3779B97F4A7C15);
}

/* ---- Sets ---- */

static COOP_INLINE free_index_set *find_set(free_index *fi, coop_stream stream)
{
    if (fi->last_set && fi->last_set->stream == stream)
        return fi->last_set;
    for (size_t i = 0; i < fi->num_sets; i++)
        if (fi->sets[i]->stream == stream)
            return fi->last_set = fi->sets[i];
    return NULL;
}

/* ---- Bins ---- */

static inline unsigned bin_of(uint64_t size)
{
    uint64_t u = size >> 9;
    if (u < (1u << FREE_INDEX_SUBBIN_BITS))
        return (unsigned)u;
    unsigned fl = 63u - (unsigned)__builtin_clzll(u);
    unsigned sl =
        (unsigned)(u >> (fl - FREE_INDEX_SUBBIN_BITS)) & ((1u << FREE_INDEX_SUBBIN_BITS) - 1);
    return ((fl - FREE_INDEX_SUBBIN_BITS + 1) << FREE_INDEX_SUBBIN_BITS) + sl;
}

#define WORDS (FREE_INDEX_BINS / 64)
#define TOP_WORDS ((WORDS + 63) / 64)

static inline void bin_mark(free_index_set *set, unsigned bin, bool nonempty)
{
    unsigned w = bin >> 6;
    if (nonempty) {
        set->nonempty[w] |= UINT64_C(1) << (bin & 63);
        set->nonempty_words[w >> 6] |= UINT64_C(1) << (w & 63);
    } else {
        set->nonempty[w] &= ~(UINT64_C(1) << (bin & 63));
        if (!set->nonempty[w])
            set->nonempty_words[w >> 6] &= ~(UINT64_C(1) << (w & 63));
    }
}

/* First non-empty word >= w, or WORDS. */
static inline unsigned next_word(const free_index_set *set, unsigned w)
{
    unsigned t = w >> 6;
    if (t >= TOP_WORDS)
        return WORDS;
    uint64_t top = set->nonempty_words[t] & (~UINT64_C(0) << (w & 63));
    while (!top) {
        if (++t == TOP_WORDS)
            return WORDS;
        top = set->nonempty_words[t];
    }
    return (t << 6) + (unsigned)__builtin_ctzll(top);
}

/* First non-empty bin >= bin, or FREE_INDEX_BINS. */
static inline unsigned next_bin(const free_index_set *set, unsigned bin)
{
    unsigned w = bin >> 6;
    if (w >= WORDS)
        return FREE_INDEX_BINS;
    uint64_t word = set->nonempty[w] & (~UINT64_C(0) << (bin & 63));
    if (!word) {
        w = next_word(set, w + 1);
        if (w >= WORDS)
            return FREE_INDEX_BINS;
        word = set->nonempty[w];
    }
    return (w << 6) + (unsigned)__builtin_ctzll(word);
}

/* Last non-empty bin, or FREE_INDEX_BINS if none. */
static inline unsigned last_bin(const free_index_set *set)
{
    if (set->count == 0)
        return FREE_INDEX_BINS;
    for (unsigned t = TOP_WORDS; t-- > 0;)
        if (set->nonempty_words[t]) {
            unsigned w = (t << 6) + 63u - (unsigned)__builtin_clzll(set->nonempty_words[t]);
            return (w << 6) + 63u - (unsigned)__builtin_clzll(set->nonempty[w]);
        }
    return FREE_INDEX_BINS;
}

void free_index_init(free_index *fi, coop_stream any_tag, meta_heap *heap)
{
    fi->sets = NULL;
    fi->num_sets = fi->cap_sets = 0;
    fi->count = 0;
    fi->any = any_tag;
    fi->any_set = fi->last_set = NULL;
    fi->heap = heap;
}

void free_index_fini(free_index *fi)
{
    for (size_t i = 0; i < fi->num_sets; i++)
        meta_free(fi->heap, fi->sets[i], sizeof *fi->sets[i]);
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
        free_index_set **sets = meta_alloc(fi->heap, cap * sizeof *sets);
        if (!sets)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a free-index set");
        for (size_t i = 0; i < fi->num_sets; i++)
            sets[i] = fi->sets[i];
        meta_free(fi->heap, fi->sets, fi->cap_sets * sizeof *fi->sets);
        fi->sets = sets;
        fi->cap_sets = cap;
    }
    free_index_set *set = meta_zalloc(fi->heap, sizeof *set);
    if (!set)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a free-index set");
    set->stream = stream;
    fi->sets[fi->num_sets++] = set;
    if (stream == fi->any)
        fi->any_set = set;
    return COOP_OK;
}

bool free_index_drop(free_index *fi, coop_stream stream)
{
    for (size_t i = 0; i < fi->num_sets; i++) {
        free_index_set *set = fi->sets[i];
        if (set->stream != stream)
            continue;
        if (stream == fi->any || set->count)
            return false;
        fi->sets[i] = fi->sets[--fi->num_sets]; /* unordered */
        if (fi->last_set == set)
            fi->last_set = NULL;
        meta_free(fi->heap, set, sizeof *set);
        return true;
    }
    return false;
}

/* ---- Treap operations (parent-linked; max-heap on the address hash) ---- */

/* Points whatever linked to old (parent's child or the bin root) at new_. */
static inline void replace_child(free_index_node **root, free_index_node *parent,
                                 free_index_node *old, free_index_node *new_)
{
    if (!parent)
        *root = new_;
    else if (parent->left == old)
        parent->left = new_;
    else
        parent->right = new_;
    if (new_)
        new_->parent = parent;
}

/* Rotates n above its parent. */
static COOP_INLINE void rotate_up(free_index_node **root, free_index_node *n)
{
    free_index_node *p = n->parent, *g = p->parent;
    if (p->left == n) {
        p->left = n->right;
        if (n->right)
            n->right->parent = p;
        n->right = p;
    } else {
        p->right = n->left;
        if (n->left)
            n->left->parent = p;
        n->left = p;
    }
    p->parent = n;
    replace_child(root, g, p, n);
}

static COOP_INLINE void treap_insert(free_index_node **root, free_index_node *node)
{
    free_index_node **link = root, *parent = NULL;
    while (*link) {
        parent = *link;
        link = key_less(node->size, node->addr, parent->size, parent->addr) ? &parent->left
                                                                            : &parent->right;
    }
    node->left = node->right = NULL;
    node->parent = parent;
    *link = node;
    while (node->parent && priority(node) > priority(node->parent))
        rotate_up(root, node);
}

/* Rotates node down below its higher-priority child until it has at most
 * one child (expected O(1) rotations), then splices it out. */
static COOP_INLINE void treap_remove(free_index_node **root, free_index_node *node)
{
    while (node->left && node->right)
        rotate_up(root, priority(node->left) > priority(node->right) ? node->left : node->right);
    replace_child(root, node->parent, node, node->left ? node->left : node->right);
    node->left = node->right = node->parent = NULL;
}

COOP_HOT void free_index_insert(free_index *fi, free_index_node *node, uint64_t size,
                                uintptr_t addr, coop_stream stream)
{
    free_index_set *set = find_set(fi, stream);
    node->size = size;
    node->addr = addr;
    node->stream = stream;
    unsigned bin = bin_of(size);
    if (!set->bins[bin])
        bin_mark(set, bin, true);
    treap_insert(&set->bins[bin], node);
    set->count++;
    fi->count++;
}

COOP_HOT void free_index_remove(free_index *fi, free_index_node *node)
{
    free_index_set *set = find_set(fi, node->stream);
    unsigned bin = bin_of(node->size);
    treap_remove(&set->bins[bin], node);
    if (!set->bins[bin])
        bin_mark(set, bin, false);
    set->count--;
    fi->count--;
}

COOP_HOT void free_index_replace(free_index *fi, free_index_node *old, free_index_node *node,
                                 uint64_t size, uintptr_t addr, coop_stream stream)
{
    free_index_set *set = find_set(fi, old->stream);
    unsigned old_bin = bin_of(old->size), bin = bin_of(size);
    treap_remove(&set->bins[old_bin], old);
    if (!set->bins[old_bin])
        bin_mark(set, old_bin, false);
    if (stream != set->stream) { /* a merge that retags: the node moves to stream's set */
        set->count--;
        set = find_set(fi, stream);
        set->count++;
    }
    node->size = size;
    node->addr = addr;
    node->stream = stream;
    if (!set->bins[bin])
        bin_mark(set, bin, true);
    treap_insert(&set->bins[bin], node);
}

/* Smallest node with size >= size in one treap. */
static COOP_INLINE free_index_node *lower_bound(free_index_node *n, uint64_t size)
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

static COOP_INLINE free_index_node *leftmost(free_index_node *n)
{
    while (n && n->left)
        n = n->left;
    return n;
}

static free_index_node *rightmost(free_index_node *n)
{
    while (n && n->right)
        n = n->right;
    return n;
}

/* Smallest node of one set with size >= size. */
static COOP_INLINE free_index_node *set_lower_bound(const free_index_set *set, uint64_t size)
{
    unsigned bin = bin_of(size);
    free_index_node *n = lower_bound(set->bins[bin], size);
    if (n)
        return n;
    bin = next_bin(set, bin + 1);
    return bin < FREE_INDEX_BINS ? leftmost(set->bins[bin]) : NULL;
}

COOP_HOT free_index_node *free_index_best_fit(free_index *fi, uint64_t size, coop_stream stream)
{
    const free_index_set *own = stream == fi->any ? NULL : find_set(fi, stream);
    const free_index_set *any = fi->any_set;
    free_index_node *a = own && own->count ? set_lower_bound(own, size) : NULL;
    free_index_node *b = any && any->count ? set_lower_bound(any, size) : NULL;
    if (!a || (b && key_less(b->size, b->addr, a->size, a->addr)))
        return b;
    return a;
}

free_index_node *free_index_set_fit(free_index *fi, uint64_t size, coop_stream stream)
{
    const free_index_set *set = find_set(fi, stream);
    return set && set->count ? set_lower_bound(set, size) : NULL;
}

free_index_node *free_index_next(free_index *fi, const free_index_node *n)
{
    if (n->right)
        return leftmost(n->right);
    for (const free_index_node *p = n->parent; p; n = p, p = p->parent)
        if (n == p->left)
            return (free_index_node *)p;
    const free_index_set *set = find_set(fi, n->stream);
    unsigned bin = next_bin(set, bin_of(n->size) + 1);
    return bin < FREE_INDEX_BINS ? leftmost(set->bins[bin]) : NULL;
}

free_index_node *free_index_first(free_index *fi, coop_stream stream)
{
    free_index_set *set = find_set(fi, stream);
    if (!set || set->count == 0)
        return NULL;
    return leftmost(set->bins[next_bin(set, 0)]);
}

free_index_node *free_index_max(const free_index *fi)
{
    free_index_node *best = NULL;
    for (size_t i = 0; i < fi->num_sets; i++) {
        unsigned bin = last_bin(fi->sets[i]);
        free_index_node *n = bin < FREE_INDEX_BINS ? rightmost(fi->sets[i]->bins[bin]) : NULL;
        if (n && (!best || key_less(best->size, best->addr, n->size, n->addr)))
            best = n;
    }
    return best;
}

bool free_index_contains(const free_index *fi, const free_index_node *node)
{
    const free_index_set *set = NULL;
    for (size_t i = 0; i < fi->num_sets && !set; i++)
        if (fi->sets[i]->stream == node->stream)
            set = fi->sets[i];
    const free_index_node *n = set ? set->bins[bin_of(node->size)] : NULL;
    while (n && n != node)
        n = key_less(node->size, node->addr, n->size, n->addr) ? n->left : n->right;
    if (n != node)
        return false;
    /* The parent links must lead back to the same root. */
    while (n->parent)
        n = n->parent;
    return n == set->bins[bin_of(node->size)];
}

/* ---- Checking ---- */

/* Counts nodes of a subtree whose keys must lie in (lo, hi) and in bin;
 * returns SIZE_MAX on an order, heap or bin violation. Bounds are NULL when open. */
static size_t check_subtree(const free_index_node *n, const free_index_node *lo,
                            const free_index_node *hi, coop_stream stream, unsigned bin, int depth)
{
    if (!n)
        return 0;
    if (depth > 10000 || n->stream != stream || bin_of(n->size) != bin)
        return SIZE_MAX;
    if (lo && !key_less(lo->size, lo->addr, n->size, n->addr))
        return SIZE_MAX;
    if (hi && !key_less(n->size, n->addr, hi->size, hi->addr))
        return SIZE_MAX;
    if (n->left && (priority(n->left) > priority(n) || n->left->parent != n))
        return SIZE_MAX;
    if (n->right && (priority(n->right) > priority(n) || n->right->parent != n))
        return SIZE_MAX;
    size_t l = check_subtree(n->left, lo, n, stream, bin, depth + 1);
    size_t r = check_subtree(n->right, n, hi, stream, bin, depth + 1);
    if (l == SIZE_MAX || r == SIZE_MAX)
        return SIZE_MAX;
    return l + r + 1;
}

const char *free_index_check(const free_index *fi)
{
    size_t total = 0;
    for (size_t i = 0; i < fi->num_sets; i++) {
        const free_index_set *set = fi->sets[i];
        for (size_t j = 0; j < i; j++)
            if (fi->sets[j]->stream == set->stream)
                return "free index: two sets for one stream";
        /* Visit the bins the bitmap marks (not all of them: the checker runs
         * after every operation in tests). A non-empty bin left unmarked
         * holds nodes this misses, so the count comparison catches it. */
        size_t in_set = 0;
        for (unsigned b = next_bin(set, 0); b < FREE_INDEX_BINS; b = next_bin(set, b + 1)) {
            if (!set->bins[b])
                return "free index: an empty bin is marked non-empty";
            if (set->bins[b]->parent)
                return "free index: a bin's root has a parent";
            size_t n = check_subtree(set->bins[b], NULL, NULL, set->stream, b, 0);
            if (n == SIZE_MAX)
                return "free index: a bin breaks key order, heap order, parent links, its "
                       "size range or its stream tag";
            in_set += n;
        }
        if (in_set != set->count)
            return "free index: a set's node count differs from its trees";
        for (unsigned w = 0; w < WORDS; w++)
            if (!!set->nonempty[w] != !!(set->nonempty_words[w >> 6] >> (w & 63) & 1))
                return "free index: the word summary disagrees with the bin bitmap";
        total += in_set;
    }
    if (total != fi->count)
        return "free index: total count differs from the sets";
    return NULL;
}
