/*
 * libFuzzer harness: trace_read, format detection then the pickle, text,
 * minimalloc or DTR reader, with the property of fuzz_reader.h (mutations
 * may cross from one format into another).
 */
#include "fuzz_reader.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_reader_check(trace_read, data, len);
    return 0;
}
