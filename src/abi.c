/* The sizes of the public structures and the offsets of their fields, for
 * bindings that mirror them (python/coop/native.py compares its ctypes
 * mirrors with these before it uses a library: one of another build may lay
 * them out otherwise even where its version string is the same; a size alone
 * misses two fields of one width swapped). See coop_abi_size and
 * coop_abi_offset in coop.h. */
#include <stddef.h>
#include <stdint.h>
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

/* One row per field, its names spelt by the preprocessor from the code that
 * takes its offset, so a row cannot name one field and measure another. */
#define FIELD(type, field) #type, #field, offsetof(type, field)

size_t coop_abi_offset(const char *type, const char *field)
{
    static const struct {
        const char *type;
        const char *field;
        size_t offset;
    } fields[] = {
        {FIELD(coop_config, backend)},
        {FIELD(coop_config, device)},
        {FIELD(coop_config, capacity)},
        {FIELD(coop_config, page_size)},
        {FIELD(coop_config, va_size)},
        {FIELD(coop_config, segment_size)},
        {FIELD(coop_config, min_split)},
        {FIELD(coop_config, use_vmm)},
        {FIELD(coop_config, check)},
        {FIELD(coop_config, single_thread)},
        {FIELD(coop_config, never_wait)},
        {FIELD(coop_config, fault_kinds)},
        {FIELD(coop_config, fault_nth)},

        {FIELD(coop_stat, current)},
        {FIELD(coop_stat, peak)},
        {FIELD(coop_stat, allocated)},
        {FIELD(coop_stat, freed)},

        {FIELD(coop_stats, allocation)},
        {FIELD(coop_stats, segment)},
        {FIELD(coop_stats, active)},
        {FIELD(coop_stats, inactive_split)},
        {FIELD(coop_stats, allocated_bytes)},
        {FIELD(coop_stats, reserved_bytes)},
        {FIELD(coop_stats, active_bytes)},
        {FIELD(coop_stats, inactive_split_bytes)},
        {FIELD(coop_stats, requested_bytes)},
        {FIELD(coop_stats, num_alloc_retries)},
        {FIELD(coop_stats, num_ooms)},
        {FIELD(coop_stats, num_maps)},
        {FIELD(coop_stats, num_unmaps)},
        {FIELD(coop_stats, map_bytes)},
        {FIELD(coop_stats, capacity)},
        {FIELD(coop_stats, free_bytes)},
        {FIELD(coop_stats, largest_free_block)},
        {FIELD(coop_stats, num_free_blocks)},
        {FIELD(coop_stats, fragmentation)},
        {FIELD(coop_stats, reserved_over_allocated)},

        {FIELD(coop_block_info, address)},
        {FIELD(coop_block_info, size)},
        {FIELD(coop_block_info, requested_size)},
        {FIELD(coop_block_info, state)},
        {FIELD(coop_block_info, stream)},
        {FIELD(coop_block_info, mapped_bytes)},

        {FIELD(coop_segment_info, address)},
        {FIELD(coop_segment_info, size)},
        {FIELD(coop_segment_info, mapped_bytes)},
        {FIELD(coop_segment_info, num_blocks)},

        {FIELD(coop_torch_event, time_us)},
        {FIELD(coop_torch_event, address)},
        {FIELD(coop_torch_event, size)},
        {FIELD(coop_torch_event, stream)},
        {FIELD(coop_torch_event, action)},
        {FIELD(coop_torch_event, device)},

        {FIELD(coop_torch_range, address)},
        {FIELD(coop_torch_range, size)},

        {FIELD(coop_torch_snapshot, device)},
        {FIELD(coop_torch_snapshot, vmm)},
        {FIELD(coop_torch_snapshot, num_segments)},
        {FIELD(coop_torch_snapshot, segments)},
        {FIELD(coop_torch_snapshot, num_blocks)},
        {FIELD(coop_torch_snapshot, blocks)},
        {FIELD(coop_torch_snapshot, num_events)},
        {FIELD(coop_torch_snapshot, events)},
        {FIELD(coop_torch_snapshot, num_ranges)},
        {FIELD(coop_torch_snapshot, ranges)},
    };
    if (!type || !field)
        return SIZE_MAX;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(fields[i].type, type) == 0 && strcmp(fields[i].field, field) == 0)
            return fields[i].offset;
    return SIZE_MAX;
}
