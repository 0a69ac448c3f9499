/* A snapshot's allocator_settings; see torch_settings.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "trace/torch_settings.h"
#include "trace/trace.h"

/* PyTorch writes 16 roundup_power2_divisions entries and a dozen settings;
 * a container larger than this is not one PyTorch wrote. */
#define TORCH_SETTINGS_MAX_ITEMS 64

static bool int_is(const pkl_value *v, int64_t x)
{
    return (v->kind == PKL_INT || v->kind == PKL_BOOL) && !v->big && v->v.i == x;
}

/* Unlimited (size_t's maximum), which PyTorch writes cast to int64: -1. */
static bool max_split_size_default(const pkl_value *v)
{
    return int_is(v, -1) || (v->kind == PKL_INT && v->big && v->v.u == UINT64_MAX);
}

/* 0.0: no garbage collection of cached blocks. */
static bool gc_threshold_default(const pkl_value *v)
{
    return (v->kind == PKL_FLOAT && v->v.f == 0.0) || int_is(v, 0);
}

static bool expandable_segments_default(const pkl_value *v)
{
    return int_is(v, 0); /* False */
}

/* Divisions that round as the default does: round_size rounds to
 * power-of-two divisions only for more than 1 (0 is the default, and 1,
 * which PYTORCH_CUDA_ALLOC_CONF accepts, rounds to 512 bytes as well). */
static bool no_divisions(const pkl_value *v)
{
    return int_is(v, 0) || int_is(v, 1);
}

/* No rounding to power-of-two divisions: PyTorch writes a dict of size
 * interval -> divisions, all 0 (older versions one number, 0). */
static bool roundup_default(const pkl_value *v)
{
    if (no_divisions(v))
        return true;
    size_t first, step;
    if (v->kind == PKL_DICT) {
        first = 1; /* values at odd indices: key, value, key, value... */
        step = 2;
    } else if (v->kind == PKL_LIST || v->kind == PKL_TUPLE) {
        first = 0;
        step = 1;
    } else {
        return false;
    }
    if (v->v.seq.len / step > TORCH_SETTINGS_MAX_ITEMS)
        return false;
    for (size_t i = first; i < v->v.seq.len; i += step)
        if (!no_divisions(v->v.seq.items[i]))
            return false;
    return true;
}

static bool conf_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The PYTORCH_CUDA_ALLOC_CONF string (`key:value,...`, PyTorch 2.9 on) is
 * the only record of per_process_memory_fraction, a cap on what the
 * allocator may hold (its alloc_block refuses a segment or pages past it,
 * and it turns garbage_collection_threshold on); the other keys that change
 * placement have entries of their own. Default: no such option, or its last
 * value 1 (the whole device). */
static bool memory_fraction_default(const pkl_value *v)
{
    static const char key[] = "per_process_memory_fraction";
    const size_t key_len = sizeof key - 1;
    if (v->kind != PKL_STR)
        return false;
    const char *s = v->v.str.ptr;
    size_t len = v->v.str.len;
    bool is_default = true;
    for (size_t at = 0; at + key_len <= len; at++) {
        if (memcmp(s + at, key, key_len) != 0 ||
            (at > 0 && s[at - 1] != ',' && !conf_space(s[at - 1])))
            continue;
        size_t i = at + key_len;
        while (i < len && conf_space(s[i]))
            i++;
        if (i == len || s[i] != ':')
            continue; /* a longer name: not this option */
        size_t from = i + 1, to = from;
        while (to < len && s[to] != ',')
            to++;
        while (from < to && conf_space(s[from]))
            from++;
        while (to > from && conf_space(s[to - 1]))
            to--;
        char value[32]; /* "1", "1.0", "1e0"...: longer is no number PyTorch takes */
        bool fits = to - from < sizeof value;
        if (fits) {
            memcpy(value, s + from, to - from);
            value[to - from] = '\0';
        }
        char *end = NULL;
        double f = fits && to > from ? strtod(value, &end) : 0.0;
        is_default = end && *end == '\0' && f == 1.0; /* the last one counts */
    }
    return is_default;
}

/* name: the setting's name (trace.h's TRACE_TORCH_* names); key: the
 * allocator_settings key whose value is_default judges */
static const struct {
    unsigned bit;
    const char *name, *key;
    bool (*is_default)(const pkl_value *v);
} settings[] = {
    {TRACE_TORCH_EXPANDABLE_SEGMENTS, "expandable_segments", "expandable_segments",
     expandable_segments_default},
    {TRACE_TORCH_MAX_SPLIT_SIZE, "max_split_size", "max_split_size", max_split_size_default},
    {TRACE_TORCH_ROUNDUP_POWER2_DIVISIONS, "roundup_power2_divisions", "roundup_power2_divisions",
     roundup_default},
    {TRACE_TORCH_GC_THRESHOLD, "garbage_collection_threshold", "garbage_collection_threshold",
     gc_threshold_default},
    {TRACE_TORCH_MEMORY_FRACTION, "per_process_memory_fraction", "PYTORCH_CUDA_ALLOC_CONF",
     memory_fraction_default},
};

_Static_assert(2 + sizeof settings / sizeof settings[0] == TRACE_TORCH_SETTINGS_NUM_KEYS,
               "TRACE_TORCH_SETTINGS_NUM_KEYS counts the keys trace_torch_settings_keys writes");

const char **trace_torch_settings_keys(const char **keys)
{
    *keys++ = "allocator_settings";
    *keys++ = "allocator";
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        *keys++ = settings[i].key;
    return keys;
}

void trace_torch_settings_read(const pkl_value *root, trace *t)
{
    t->has_torch_settings = 0;
    t->torch_settings = 0;
    t->recorded_by_coop = 0;
    const pkl_value *dict = pkl_dict_get(root, "allocator_settings");
    /* older snapshots have none; a value that is no dict says nothing */
    if (!dict || dict->kind != PKL_DICT)
        return;
    /* coop.torch's snapshots name their allocator: their settings are
     * coop's (expandable_segments there is its vmm flag), not PyTorch's */
    const pkl_value *allocator = pkl_dict_get(dict, "allocator");
    if (allocator && pkl_str_eq(allocator, "coop")) {
        t->recorded_by_coop = 1;
        return;
    }
    t->has_torch_settings = 1;
    if (dict->v.seq.len / 2 > TORCH_SETTINGS_MAX_ITEMS) {
        /* pkl_dict_get scans the dict once per key: keep that bounded */
        for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
            t->torch_settings |= settings[i].bit;
        return;
    }
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const pkl_value *v = pkl_dict_get(dict, settings[i].key);
        if (v && !settings[i].is_default(v))
            t->torch_settings |= settings[i].bit;
    }
}

const char *trace_torch_setting_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (settings[i].bit == bit)
            return settings[i].name;
    return NULL;
}

unsigned trace_torch_setting_bit(const char *name)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (!strcmp(settings[i].name, name))
            return settings[i].bit;
    return 0;
}
