/* libFuzzer harness: the DTR operator-log reader (trace_read_dtr: the JSONL parser, then the events
 * it implies), with the property of fuzz_reader.h. */
#include "fuzz_reader.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_reader_check(trace_read_dtr, data, len);
    return 0;
}
