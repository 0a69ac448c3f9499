/* Page map: a bitmap of mapped pages; see page_map.h. */
#include "page_map.h"
#include "status.h"

/* Portable popcount: without -mpopcnt, __builtin_popcountll is a libgcc call
 * with a table per byte; this SWAR form is a dozen instructions. */
static inline unsigned popcount64(uint64_t x)
{
    x = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
    x = (x + (x >> 4)) & UINT64_C(0x0F0F0F0F0F0F0F0F);
    return (unsigned)((x * UINT64_C(0x0101010101010101)) >> 56);
}

coop_status page_map_init(page_map *pm, size_t num_pages, meta_heap *heap)
{
    size_t words = (num_pages + 63) / 64;
    pm->bits = meta_zalloc(heap, (words ? words : 1) * sizeof *pm->bits);
    if (!pm->bits)
        return coop_set_error(COOP_ERR_HOST_NOMEM, "no host memory for a page map of %zu pages",
                              num_pages);
    pm->num_pages = num_pages;
    pm->num_mapped = 0;
    return COOP_OK;
}

void page_map_fini(page_map *pm, meta_heap *heap)
{
    size_t words = (pm->num_pages + 63) / 64;
    meta_free(heap, pm->bits, (words ? words : 1) * sizeof *pm->bits);
    pm->bits = NULL;
}

/* Mask of bits [lo, hi) within one word, 0 <= lo < hi <= 64. */
static inline uint64_t word_mask(unsigned lo, unsigned hi)
{
    uint64_t upper = hi == 64 ? ~UINT64_C(0) : (UINT64_C(1) << hi) - 1;
    return upper & ~((UINT64_C(1) << lo) - 1);
}

size_t page_map_count(const page_map *pm, size_t first, size_t end)
{
    size_t n = 0;
    while (first < end) {
        size_t w = first >> 6;
        unsigned lo = first & 63;
        unsigned hi = (end - (w << 6)) >= 64 ? 64 : (unsigned)(end - (w << 6));
        n += (size_t)popcount64(pm->bits[w] & word_mask(lo, hi));
        first = (w << 6) + hi;
    }
    return n;
}

/* First page in [from, end) whose bit equals value, or end. */
static size_t find_bit(const page_map *pm, size_t from, size_t end, bool value)
{
    while (from < end) {
        size_t w = from >> 6;
        unsigned lo = from & 63;
        unsigned hi = (end - (w << 6)) >= 64 ? 64 : (unsigned)(end - (w << 6));
        uint64_t word = value ? pm->bits[w] : ~pm->bits[w];
        word &= word_mask(lo, hi);
        if (word)
            return (w << 6) + (size_t)__builtin_ctzll(word);
        from = (w << 6) + hi;
    }
    return end;
}

bool page_map_next_run(const page_map *pm, size_t from, size_t end, bool mapped, size_t *run_first,
                       size_t *run_end)
{
    size_t start = find_bit(pm, from, end, mapped);
    if (start >= end)
        return false;
    *run_first = start;
    *run_end = find_bit(pm, start, end, !mapped);
    return true;
}

void page_map_set(page_map *pm, size_t first, size_t end, bool mapped)
{
    while (first < end) {
        size_t w = first >> 6;
        unsigned lo = first & 63;
        unsigned hi = (end - (w << 6)) >= 64 ? 64 : (unsigned)(end - (w << 6));
        uint64_t mask = word_mask(lo, hi);
        size_t before = (size_t)popcount64(pm->bits[w] & mask);
        if (mapped) {
            pm->bits[w] |= mask;
            pm->num_mapped += (hi - lo) - before;
        } else {
            pm->bits[w] &= ~mask;
            pm->num_mapped -= before;
        }
        first = (w << 6) + hi;
    }
}

size_t page_map_popcount(const page_map *pm)
{
    size_t n = 0;
    for (size_t w = 0; w < (pm->num_pages + 63) / 64; w++)
        n += (size_t)popcount64(pm->bits[w]);
    return n;
}
