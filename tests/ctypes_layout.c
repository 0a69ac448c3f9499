/*
 * Prints the layout of every public struct that python/coop/native.py mirrors
 * with ctypes, one "STRUCT size BYTES" line and one "STRUCT.FIELD OFFSET SIZE"
 * line per field, and the value of each enumerator native.py copies, one
 * "NAME value V" line each, for test_torch_abi.py's Layout test to compare
 * with the ctypes classes and constants. A Python mirror that drifts from
 * coop.h makes ctypes read and write the wrong bytes (coop_pool_config writes
 * sizeof(coop_config) bytes into the Python object), which no other test
 * would notice. Sizes too: a field of the wrong width can keep every offset
 * (a float before a double, an int64 where an int is padded).
 *
 * When a field is added to one of these structs in coop.h, add it here and to
 * native.py; the test fails until both agree.
 */
#include <stddef.h>
#include <stdio.h>

#include "coop.h"

#define SIZE(type) printf(#type " size %zu\n", sizeof(type))
#define FIELD(type, field)                                                                         \
    printf(#type "." #field " %zu %zu\n", offsetof(type, field), sizeof(((type *)0)->field))
#define VALUE(name) printf(#name " value %d\n", (int)(name))

int main(void)
{
    SIZE(coop_stat);
    FIELD(coop_stat, current);
    FIELD(coop_stat, peak);
    FIELD(coop_stat, allocated);
    FIELD(coop_stat, freed);

    SIZE(coop_stats);
    FIELD(coop_stats, allocation);
    FIELD(coop_stats, segment);
    FIELD(coop_stats, active);
    FIELD(coop_stats, inactive_split);
    FIELD(coop_stats, allocated_bytes);
    FIELD(coop_stats, reserved_bytes);
    FIELD(coop_stats, active_bytes);
    FIELD(coop_stats, inactive_split_bytes);
    FIELD(coop_stats, requested_bytes);
    FIELD(coop_stats, num_alloc_retries);
    FIELD(coop_stats, num_ooms);
    FIELD(coop_stats, num_maps);
    FIELD(coop_stats, num_unmaps);
    FIELD(coop_stats, map_bytes);
    FIELD(coop_stats, capacity);
    FIELD(coop_stats, free_bytes);
    FIELD(coop_stats, largest_free_block);
    FIELD(coop_stats, num_free_blocks);
    FIELD(coop_stats, fragmentation);
    FIELD(coop_stats, reserved_over_allocated);

    SIZE(coop_block_info);
    FIELD(coop_block_info, address);
    FIELD(coop_block_info, size);
    FIELD(coop_block_info, requested_size);
    FIELD(coop_block_info, state);
    FIELD(coop_block_info, stream);
    FIELD(coop_block_info, mapped_bytes);

    SIZE(coop_segment_info);
    FIELD(coop_segment_info, address);
    FIELD(coop_segment_info, size);
    FIELD(coop_segment_info, mapped_bytes);
    FIELD(coop_segment_info, num_blocks);

    SIZE(coop_config);
    FIELD(coop_config, backend);
    FIELD(coop_config, device);
    FIELD(coop_config, capacity);
    FIELD(coop_config, page_size);
    FIELD(coop_config, va_size);
    FIELD(coop_config, segment_size);
    FIELD(coop_config, min_split);
    FIELD(coop_config, use_vmm);
    FIELD(coop_config, check);
    FIELD(coop_config, single_thread);
    FIELD(coop_config, never_wait);
    FIELD(coop_config, fault_kinds);
    FIELD(coop_config, fault_nth);

    SIZE(coop_torch_event);
    FIELD(coop_torch_event, time_us);
    FIELD(coop_torch_event, address);
    FIELD(coop_torch_event, size);
    FIELD(coop_torch_event, stream);
    FIELD(coop_torch_event, action);
    FIELD(coop_torch_event, device);

    SIZE(coop_torch_range);
    FIELD(coop_torch_range, address);
    FIELD(coop_torch_range, size);

    SIZE(coop_torch_snapshot);
    FIELD(coop_torch_snapshot, device);
    FIELD(coop_torch_snapshot, vmm);
    FIELD(coop_torch_snapshot, num_segments);
    FIELD(coop_torch_snapshot, segments);
    FIELD(coop_torch_snapshot, num_blocks);
    FIELD(coop_torch_snapshot, blocks);
    FIELD(coop_torch_snapshot, num_events);
    FIELD(coop_torch_snapshot, events);
    FIELD(coop_torch_snapshot, num_ranges);
    FIELD(coop_torch_snapshot, ranges);

    VALUE(COOP_OK);
    VALUE(COOP_ERR_NOMEM);
    VALUE(COOP_ERR_INVALID);
    VALUE(COOP_ERR_FOREIGN_PTR);
    VALUE(COOP_ERR_DOUBLE_FREE);
    VALUE(COOP_ERR_INTERIOR_PTR);
    VALUE(COOP_ERR_BACKEND);
    VALUE(COOP_ERR_NO_DRIVER);
    VALUE(COOP_ERR_UNSUPPORTED);
    VALUE(COOP_ERR_CORRUPT);
    VALUE(COOP_ERR_HOST_NOMEM);
    VALUE(COOP_ERR_BUSY);
    VALUE(COOP_BLOCK_FREE);
    VALUE(COOP_BLOCK_ALLOCATED);
    VALUE(COOP_BLOCK_PENDING);
    VALUE(COOP_TORCH_ALLOC);
    VALUE(COOP_TORCH_FREE_REQUESTED);
    VALUE(COOP_TORCH_FREE_COMPLETED);
    VALUE(COOP_TORCH_OOM);
    return 0;
}
