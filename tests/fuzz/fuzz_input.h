/*
 * Reading a fuzzer's input as a sequence of operations: bytes taken in
 * order, 0 once the input is used up (so any input, however short, is a
 * whole program). Shared by the harnesses that drive an API (fuzz_api,
 * fuzz_policies).
 */
#ifndef COOP_FUZZ_INPUT_H
#define COOP_FUZZ_INPUT_H

#include <stddef.h>

typedef struct fuzz_input {
    const unsigned char *data;
    size_t len, pos;
} fuzz_input;

static inline unsigned fuzz_byte(fuzz_input *in)
{
    return in->pos < in->len ? in->data[in->pos++] : 0;
}

/* Two bytes, little-endian. */
static inline unsigned fuzz_u16(fuzz_input *in)
{
    unsigned lo = fuzz_byte(in);
    return lo | fuzz_byte(in) << 8;
}

#endif
