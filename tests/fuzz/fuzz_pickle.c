/* libFuzzer harness: the PyTorch memory snapshot pickle reader (trace_read_pickle), with the
 * property of fuzz_reader.h; and the parse the reader makes, pkl_parse_pruned, against the
 * whole parse of the same bytes (pickle_same.h): the same status and message, and the same
 * values wherever the pruned parse kept them. Pruning frees values while the parse goes on,
 * guided by a scan of the memo, so a wrong scan would show here as a difference (or, under
 * ASan, a use after free). And the reader's sealed read (each trace entry summarized into its
 * node as it is parsed) against its unsealed one: the same status, message and trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"
#include "pickle_same.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

/* Keys a snapshot consumer reads: every other key's containers are pruned. */
static const char *const read_keys[] = {"device_traces", "segments", "blocks",  "action", "addr",
                                        "size",          "stream",   "time_us", NULL};

static void check_pruned_parse(const unsigned char *data, size_t len)
{
    pkl_arena whole = {0}, part = {0};
    const pkl_value *a_root = NULL, *b_root = NULL;
    char message[512];
    coop_status a_st = pkl_parse("fuzz", data, len, &whole, &a_root);
    snprintf(message, sizeof message, "%s", a_st == COOP_OK ? "" : coop_last_error());
    coop_status b_st = pkl_parse_pruned("fuzz", data, len, read_keys, &part, &b_root);
    int pruned = 0;
    if (a_st != b_st || (b_st != COOP_OK && strcmp(message, coop_last_error()))) {
        fprintf(stderr, "whole parse: %d '%s'; pruned: %d '%s'\n", (int)a_st, message, (int)b_st,
                b_st == COOP_OK ? "" : coop_last_error());
        abort();
    }
    if (a_st == COOP_OK && !pkl_same_but_pruned(a_root, b_root, read_keys, &pruned)) {
        fprintf(stderr, "the pruned parse differs from the whole one in what it keeps\n");
        abort();
    }
    pkl_arena_free(&whole);
    pkl_arena_free(&part);
}

/* trace_read_pickle (sealed) and trace_read_pickle_unsealed of the same bytes agree. */
static void check_sealed_read(const unsigned char *data, size_t len)
{
    const char *in = fuzz_write_scratch("in", data, len);
    trace a, b;
    char message[512];
    coop_status a_st = trace_read_pickle(in, &a);
    snprintf(message, sizeof message, "%s", a_st == COOP_OK ? "" : coop_last_error());
    coop_status b_st = trace_read_pickle_unsealed(in, -1, &b);
    if (a_st != b_st || (b_st != COOP_OK && strcmp(message, coop_last_error()))) {
        fprintf(stderr, "sealed read: %d '%s'; unsealed: %d '%s'\n", (int)a_st, message, (int)b_st,
                b_st == COOP_OK ? "" : coop_last_error());
        abort();
    }
    if (a_st != COOP_OK)
        return;
    if (!fuzz_same_trace(&a, &b) || a.has_torch_settings != b.has_torch_settings ||
        a.torch_settings != b.torch_settings || a.recorded_by_coop != b.recorded_by_coop) {
        fprintf(stderr, "the sealed read differs from the unsealed one\n");
        abort();
    }
    trace_free(&a);
    trace_free(&b);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_reader_check(trace_read_pickle, data, len);
    check_sealed_read(data, len);
    check_pruned_parse(data, len);
    return 0;
}
