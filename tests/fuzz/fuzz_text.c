/* libFuzzer harness: the coop text-trace reader (trace_read_text), with the property of
 * fuzz_reader.h. */
#include "fuzz_reader.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    fuzz_reader_check(trace_read_text, data, len);
    return 0;
}
