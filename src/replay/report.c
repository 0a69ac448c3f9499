/* Table and JSON output of replay rows; see report.h. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay/report.h"
#include "utf8.h"

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

/* GMLake's fragmentation: the share of the peak reservation never active at once. */
static double gmlake_frag(const replay_row *r)
{
    return r->peak_reserved ? 1.0 - ratio(r->peak_active, r->peak_reserved) : 0.0;
}

/* A run that ran out of memory stopped at its oom_event: its peak reserved
 * covers only the events before, while peak_live is the whole trace's, so
 * their ratio (0.77 on cs336-b at 10 GiB) would read as a property of the
 * trace; the same goes for GMLake's ratio of two truncated peaks. */
static bool has_reserved_over_live(const replay_row *r)
{
    return r->peak_live > 0 && !r->oom;
}

static bool has_gmlake_frag(const replay_row *r)
{
    return r->peak_active > 0 && !r->oom;
}

/* JSON has no NaN or infinity (json_real refuses them, and the whole row
 * failed): null, as for a figure that is not known. */
static json_t *real_or_null(bool valid, double x)
{
    return valid && isfinite(x) ? json_real(x) : json_null();
}

/* A name as a JSON string: a trace's file name (and its path) may hold any
 * bytes, and json_string refuses those that are not UTF-8 (the row was lost
 * as "writing the JSON rows failed"): each such byte becomes U+FFFD, as in
 * coop sim's rows. Control characters, quotes and backslashes are jansson's
 * to escape. */
static json_t *name_string(const char *s)
{
    size_t len = strlen(s);
    char *copy = malloc(3 * len + 1); /* U+FFFD is 3 bytes for 1 */
    if (!copy)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    while (*p) {
        size_t k = utf8_sequence_length(p);
        if (k) {
            memcpy(copy + n, p, k);
            n += k;
            p += k;
        } else {
            memcpy(copy + n, "\xef\xbf\xbd", 3);
            n += 3;
            p++;
        }
    }
    json_t *str = json_stringn(copy, n);
    free(copy);
    return str;
}

/* A byte count as a JSON integer; one beyond json_int_t (2^63 and more,
 * which a cast made negative) as a real. */
static json_t *bytes(uint64_t x)
{
    return x > (uint64_t)INT64_MAX ? json_real((double)x) : json_integer((json_int_t)x);
}

static json_t *bytes_or_null(bool valid, uint64_t x)
{
    return valid ? bytes(x) : json_null();
}

bool replay_report_json(FILE *out, const replay_row *r)
{
    json_t *o = json_object();
    if (!o)
        return false;
    int err = 0;
    err |= json_object_set_new(o, "trace", name_string(r->trace));
    err |= json_object_set_new(o, "policy", name_string(r->policy));
    err |= json_object_set_new(o, "events", bytes(r->events));
    err |= json_object_set_new(o, "peak_live_bytes", bytes(r->peak_live));
    err |= json_object_set_new(o, "peak_reserved_bytes", bytes(r->peak_reserved));
    err |= json_object_set_new(
        o, "reserved_over_live",
        real_or_null(has_reserved_over_live(r), ratio(r->peak_reserved, r->peak_live)));
    err |= json_object_set_new(o, "min_capacity_bytes",
                               bytes_or_null(r->has_min_capacity, r->min_capacity));
    err |= json_object_set_new(o, "map_bytes", bytes_or_null(r->has_map_bytes, r->map_bytes));
    err |= json_object_set_new(o, "frag_mean", real_or_null(r->has_frag, r->frag_mean));
    err |= json_object_set_new(o, "frag_max", real_or_null(r->has_frag, r->frag_max));
    err |= json_object_set_new(o, "ns_per_op", real_or_null(r->has_ns, r->ns_per_op));
    err |= json_object_set_new(o, "gmlake_frag", real_or_null(has_gmlake_frag(r), gmlake_frag(r)));
    err |= json_object_set_new(o, "oom_event", bytes_or_null(r->oom, r->oom_event));
    err |= json_object_set_new(o, "torch_settings_default",
                               r->has_torch_settings ? json_boolean(r->torch_settings_default)
                                                     : json_null());
    err |= json_object_set_new(o, "recorded_by_coop", json_boolean(r->recorded_by_coop));
    err |= json_object_set_new(o, "path", r->path ? name_string(r->path) : json_null());
    bool ok = !err && json_dumpf(o, out, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0 &&
              fputc('\n', out) != EOF;
    json_decref(o);
    return ok;
}

/* Sizes print in MiB, or KiB when every trace is small (minimalloc's 1 MB). */
static double unit_bytes = 1048576.0;

static void mib_cell(char *buf, size_t len, bool valid, uint64_t bytes)
{
    if (valid)
        snprintf(buf, len, "%.2f", (double)bytes / unit_bytes);
    else
        snprintf(buf, len, "-");
}

static void real_cell(char *buf, size_t len, bool valid, const char *fmt, double x)
{
    if (valid)
        snprintf(buf, len, fmt, x);
    else
        snprintf(buf, len, "-");
}

enum { NUM_COLUMNS = 13, CELL = 256 }; /* a cell holds a whole file name */

static const char *const headers_mib[NUM_COLUMNS] = {
    "trace",        "policy",  "events",    "live_MiB", "reserved_MiB", "res/live", "min_cap_MiB",
    "min_cap/live", "map_MiB", "frag_mean", "frag_max", "gmlake",       "ns/op",
};
static const char *const headers_kib[NUM_COLUMNS] = {
    "trace",        "policy",  "events",    "live_KiB", "reserved_KiB", "res/live", "min_cap_KiB",
    "min_cap/live", "map_KiB", "frag_mean", "frag_max", "gmlake",       "ns/op",
};

static void cells_of(const replay_row *r, char cells[NUM_COLUMNS][CELL])
{
    snprintf(cells[0], CELL, "%s", r->trace);
    snprintf(cells[1], CELL, "%s", r->policy);
    snprintf(cells[2], CELL, "%llu", (unsigned long long)r->events);
    mib_cell(cells[3], CELL, true, r->peak_live);
    mib_cell(cells[4], CELL, true, r->peak_reserved);
    real_cell(cells[5], CELL, has_reserved_over_live(r), "%.3f",
              ratio(r->peak_reserved, r->peak_live));
    if (r->oom)
        snprintf(cells[6], CELL, "OOM@%llu", (unsigned long long)r->oom_event);
    else
        mib_cell(cells[6], CELL, r->has_min_capacity, r->min_capacity);
    real_cell(cells[7], CELL, r->has_min_capacity && r->peak_live > 0, "%.4f",
              ratio(r->min_capacity, r->peak_live));
    mib_cell(cells[8], CELL, r->has_map_bytes, r->map_bytes);
    real_cell(cells[9], CELL, r->has_frag, "%.3f", r->frag_mean);
    real_cell(cells[10], CELL, r->has_frag, "%.3f", r->frag_max);
    real_cell(cells[11], CELL, has_gmlake_frag(r), "%.3f", gmlake_frag(r));
    real_cell(cells[12], CELL, r->has_ns, "%.0f", r->ns_per_op);
}

void replay_report_table(FILE *out, const replay_row *rows, size_t count)
{
    size_t width[NUM_COLUMNS];
    char cells[NUM_COLUMNS][CELL];
    uint64_t largest = 0;
    /* a trace is small by its live bytes too: one that ran out of
     * --capacity at once reserved nothing, and 1.7 GB live read as KiB */
    for (size_t i = 0; i < count; i++) {
        if (rows[i].peak_reserved > largest)
            largest = rows[i].peak_reserved;
        if (rows[i].peak_live > largest)
            largest = rows[i].peak_live;
    }
    bool small = largest < (64u << 20);
    unit_bytes = small ? 1024.0 : 1048576.0;
    const char *const *headers = small ? headers_kib : headers_mib;
    for (int c = 0; c < NUM_COLUMNS; c++)
        width[c] = strlen(headers[c]);
    for (size_t i = 0; i < count; i++) {
        cells_of(&rows[i], cells);
        for (int c = 0; c < NUM_COLUMNS; c++)
            if (strlen(cells[c]) > width[c])
                width[c] = strlen(cells[c]);
    }
    /* text columns left-aligned, numbers right-aligned */
    for (int c = 0; c < NUM_COLUMNS; c++)
        fprintf(out, c < 2 ? "%-*s%s" : "%*s%s", (int)width[c], headers[c],
                c + 1 < NUM_COLUMNS ? "  " : "\n");
    for (size_t i = 0; i < count; i++) {
        cells_of(&rows[i], cells);
        for (int c = 0; c < NUM_COLUMNS; c++)
            fprintf(out, c < 2 ? "%-*s%s" : "%*s%s", (int)width[c], cells[c],
                    c + 1 < NUM_COLUMNS ? "  " : "\n");
    }
}
