/*
 * Where a message stops being well-formed UTF-8, for the tests that check a
 * message cut to fit ends between characters (status_test, dtr_log_test,
 * torch_abi_test, replay_cli_test, trace_text_test). The includer has
 * included cmocka.h.
 */
#ifndef COOP_TEST_UTF8_VALID_H
#define COOP_TEST_UTF8_VALID_H

#include "utf8.h"

/* Fails the test, naming what and the byte, unless text is UTF-8. */
static inline void expect_valid_utf8(const char *what, const char *text)
{
    const unsigned char *m = (const unsigned char *)text;
    for (size_t i = 0; m[i];) {
        size_t n = utf8_sequence_length(m + i);
        if (!n)
            fail_msg("%s: byte %zu of \"%s\" is no whole character", what, i, text);
        i += n;
    }
}

/* n copies of the character c (1 to 4 bytes) into out, NUL-ended; returns out. */
static inline char *repeat_character(char *out, const char *c, size_t n)
{
    size_t k = strlen(c);
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * k, c, k);
    out[n * k] = '\0';
    return out;
}

#endif
