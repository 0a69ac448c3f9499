/*
 * COOP_HOT marks the functions of the malloc and free paths. GCC and clang
 * place functions with the hot attribute in .text.hot, so the paths sit
 * together, in the same order, whatever else the binary links in. Without
 * it, a 20-line function added to an unrelated file moved coop bench's 10k
 * figure from 152.1 to 147.4 ns per pair (medians of 10 alternating runs);
 * with it, the same probe and another in a second file left it at 147.6,
 * 145.9 and 146.4 (1k: 113.0-113.7; 100k: 382-391).
 *
 * COOP_INLINE forces a small helper of those paths into its callers: GCC
 * keeps helpers that are called from several places (take_record,
 * link_after, the treap operations, count_alloc...) out of line in plain
 * .text, so a small malloc made about ten calls, each with its own saves
 * and restores, to code away from .text.hot.
 */
#ifndef COOP_HOT_PATH_H
#define COOP_HOT_PATH_H

#define COOP_HOT __attribute__((hot))
#define COOP_INLINE inline __attribute__((always_inline))

#endif
