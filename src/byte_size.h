/* Byte counts as users write them: one grammar for every place that reads
 * one (PYTORCH_CUDA_ALLOC_CONF's capacity and sizes, `coop replay
 * --capacity/--page`), so a size accepted in one is accepted in the other.
 *
 * Grammar: decimal digits or "0x" and hex digits (never octal: "010" is
 * ten), then optionally a binary unit K, M, G or T followed by nothing, "i",
 * "B" or "iB", or "B" alone; letters in any case ("Gb" is bytes too: a
 * capacity in bits makes no sense). Zero and values of 2^64 or more are
 * refused (byte_size_scan tells which). Header-only because libcoop hides
 * its internal symbols and the command-line tools link against its shared
 * build. */
#ifndef COOP_BYTE_SIZE_H
#define COOP_BYTE_SIZE_H

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* c's value as a hex digit, or 16 if it is none */
static inline unsigned byte_size_digit(int c)
{
    if (isdigit(c))
        return (unsigned)(c - '0');
    return isxdigit(c) ? (unsigned)(toupper(c) - 'A' + 10) : 16u;
}

/* What byte_size_scan made of a text */
typedef enum {
    BYTE_SIZE_OK,
    BYTE_SIZE_MALFORMED, /* not the grammar, or zero */
    BYTE_SIZE_TOO_LARGE, /* the grammar, but 2^64 bytes or more */
} byte_size_result;

/* Parses text[0..len) as a byte count into *out (untouched unless
 * BYTE_SIZE_OK). Too large is told apart from malformed so that a reader
 * can say "too large" for 99999999999999999999G rather than "not a size". */
static inline byte_size_result byte_size_scan(const char *text, size_t len, uint64_t *out)
{
    size_t i = 0;
    unsigned base = 10;
    if (len > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        i = 2;
    }
    size_t first_digit = i;
    uint64_t value = 0;
    bool overflow = false; /* digits read on to check the rest's grammar */
    for (; i < len; i++) {
        unsigned d = byte_size_digit((unsigned char)text[i]);
        if (d >= base)
            break;
        if (value > (UINT64_MAX - d) / base)
            overflow = true;
        else
            value = value * base + d;
    }
    if (i == first_digit)
        return BYTE_SIZE_MALFORMED;
    unsigned shift = 0;
    if (i < len) {
        int unit = toupper((unsigned char)text[i]);
        const char *units = "KMGT";
        for (unsigned u = 0; units[u]; u++)
            if (unit == units[u])
                shift = 10 * (u + 1);
        if (!shift && unit != 'B')
            return BYTE_SIZE_MALFORMED;
        /* after the unit: "B" alone ends; K..T take an optional "i", then
         * an optional "B" */
        const char *rest = text + i + 1;
        size_t rest_len = len - i - 1;
        if (shift && rest_len && toupper((unsigned char)*rest) == 'I') {
            rest++;
            rest_len--;
        }
        if (shift && rest_len == 1 && toupper((unsigned char)*rest) == 'B')
            rest_len = 0;
        if (rest_len)
            return BYTE_SIZE_MALFORMED;
    }
    if (overflow || value > (UINT64_MAX >> shift))
        return BYTE_SIZE_TOO_LARGE;
    if (value == 0)
        return BYTE_SIZE_MALFORMED;
    *out = value << shift;
    return BYTE_SIZE_OK;
}

/* byte_size_scan, true for BYTE_SIZE_OK: for readers with one message */
static inline bool byte_size_parse(const char *text, size_t len, uint64_t *out)
{
    return byte_size_scan(text, len, out) == BYTE_SIZE_OK;
}

#endif
