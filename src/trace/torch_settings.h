/*
 * The allocator settings a PyTorch snapshot records (its `allocator_settings`
 * dict), reduced to what replay needs to know: which of the settings that
 * change placement are not PyTorch's defaults (trace.h, TRACE_TORCH_*), since
 * the torch policy emulates the defaults only.
 */
#ifndef COOP_TRACE_TORCH_SETTINGS_H
#define COOP_TRACE_TORCH_SETTINGS_H

#include "trace/event.h"
#include "trace/pickle.h"

/* Sets t->has_torch_settings when the snapshot dict root holds an
 * allocator_settings dict, and t->torch_settings to the TRACE_TORCH_* bits of
 * the settings in it that are not PyTorch's defaults. A setting the dict
 * does not name counts as default; one with a value of another type or
 * shape than PyTorch writes counts as not default (nothing vouches for it).
 * Never fails: the settings only inform; the work is bounded (fixed keys,
 * at most TORCH_SETTINGS_MAX_ITEMS items looked at in a container). */
void trace_torch_settings_read(const pkl_value *root, trace *t);

/* The dict keys trace_torch_settings_read looks up, for a parse that
 * prunes the values of all others (pkl_parse_pruned): written to
 * keys[0 .. TRACE_TORCH_SETTINGS_NUM_KEYS), from the table of settings it
 * reads; returns keys + TRACE_TORCH_SETTINGS_NUM_KEYS. */
#define TRACE_TORCH_SETTINGS_NUM_KEYS 7
const char **trace_torch_settings_keys(const char **keys);

#endif
