/* coop bench --floor: a skeleton malloc+free pair that makes only the
 * metadata accesses a pair cannot avoid, over arrays sized as coop's
 * metadata at each live-block count (see bench_floor.c). */
#ifndef COOP_CLI_BENCH_FLOOR_H
#define COOP_CLI_BENCH_FLOOR_H

#include <stdbool.h>
#include <stddef.h>

/* Prints ns per skeleton pair for each live count (a table, or one JSON
 * object per count); 0, or 1 without host memory. */
int bench_floor_run(const size_t *live, size_t num_live, bool json);

#endif
