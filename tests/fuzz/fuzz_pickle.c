/* libFuzzer harness: the PyTorch memory snapshot pickle reader (trace_read_pickle), with the
 * property of fuzz_reader.h; and the parse the reader makes, pkl_parse_pruned, against the
 * whole parse of the same bytes (pickle_same.h): the same status and message, and the same
 * values wherever the pruned parse kept them. Pruning frees values while the parse goes on,
 * guided by a scan of the memo, so a wrong scan would show here as a difference (or, under
 * ASan, a use after free). And the reader's sealed read (each trace entry summarized into its
 * node as it is parsed) against its unsealed one: the same status, message and trace. And the
 * parse through a window (pkl_parse_stream, the reader's path for a regular file: a first
 * pass fed in pieces, the second read through a 256-byte window in pieces of other sizes)
 * against the pruned parse of the whole: the same status, message and tree. */
#include <stdint.h>
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

/* The input read back in pieces (the second pass), of sizes from a generator seeded by the
 * input's length: 1 to 300 bytes, so a piece is sometimes longer than the window wants. */
typedef struct pieces {
    const unsigned char *b;
    size_t len, at;
    uint32_t rng;
} pieces;

static size_t piece_size(pieces *r, size_t cap)
{
    r->rng = r->rng * 1103515245u + 12345u;
    size_t n = 1 + (r->rng >> 16) % 300;
    return n < cap ? n : cap;
}

static coop_status read_pieces(void *ctx, unsigned char *buf, size_t cap, size_t *got)
{
    pieces *r = ctx;
    size_t n = piece_size(r, cap), left = r->len - r->at;
    *got = n < left ? n : left;
    memcpy(buf, r->b + r->at, *got);
    r->at += *got;
    return COOP_OK;
}

static void check_streamed_parse(const unsigned char *data, size_t len)
{
    pkl_arena whole = {0}, part = {0}, streamed = {0};
    const pkl_value *a_root = NULL, *b_root = NULL, *c_root = NULL;
    char message[512];
    coop_status a_st = pkl_parse("fuzz", data, len, &whole, &a_root);
    coop_status b_st = pkl_parse_pruned("fuzz", data, len, read_keys, &part, &b_root);
    snprintf(message, sizeof message, "%s", b_st == COOP_OK ? "" : coop_last_error());
    pkl_scan scan = {.path = "fuzz"};
    pieces first = {.b = data, .len = len, .rng = (uint32_t)len * 2654435761u};
    coop_status c_st = COOP_OK;
    for (size_t at = 0; at < len && c_st == COOP_OK;) {
        size_t n = piece_size(&first, len - at);
        c_st = pkl_scan_feed(&scan, data + at, n);
        at += n;
    }
    pieces second = {.b = data, .len = len, .rng = first.rng};
    size_t window = pkl_stream_window;
    pkl_stream_window = 0; /* its least, 256 bytes */
    if (c_st == COOP_OK)
        c_st = pkl_parse_stream("fuzz", &scan, read_pieces, &second, read_keys, NULL, NULL,
                                &streamed, &c_root);
    pkl_stream_window = window;
    pkl_scan_free(&scan);
    if (b_st != c_st || (c_st != COOP_OK && strcmp(message, coop_last_error()))) {
        fprintf(stderr, "pruned parse: %d '%s'; through a window: %d '%s'\n", (int)b_st, message,
                (int)c_st, c_st == COOP_OK ? "" : coop_last_error());
        abort();
    }
    int pruned = 0, streamed_pruned = 0;
    if (a_st == COOP_OK && b_st == COOP_OK &&
        (!pkl_same_but_pruned(a_root, b_root, read_keys, &pruned) ||
         !pkl_same_but_pruned(a_root, c_root, read_keys, &streamed_pruned) ||
         pruned != streamed_pruned)) {
        fprintf(stderr, "the parse through a window differs from the pruned one\n");
        abort();
    }
    pkl_arena_free(&whole);
    pkl_arena_free(&part);
    pkl_arena_free(&streamed);
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
    check_streamed_parse(data, len);
    return 0;
}
