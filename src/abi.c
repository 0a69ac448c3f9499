/* The sizes of the public structures, for bindings that mirror them
 * (python/coop/native.py compares its ctypes mirrors with these before it
 * uses a library: one of another build may lay them out otherwise even
 * where its version string is the same). See coop_abi_size in coop.h. */
#include <string.h>

#include "coop.h"

size_t coop_abi_size(const char *type)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        {"coop_config", sizeof(coop_config)},
        {"coop_stat", sizeof(coop_stat)},
        {"coop_stats", sizeof(coop_stats)},
        {"coop_block_info", sizeof(coop_block_info)},
        {"coop_segment_info", sizeof(coop_segment_info)},
        {"coop_torch_event", sizeof(coop_torch_event)},
        {"coop_torch_range", sizeof(coop_torch_range)},
        {"coop_torch_snapshot", sizeof(coop_torch_snapshot)},
    };
    if (!type)
        return 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i].name, type) == 0)
            return types[i].size;
    return 0;
}
