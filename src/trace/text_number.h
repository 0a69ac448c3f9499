/*
 * Numbers in text traces and CSVs: strict whole-field parsing (no leading
 * spaces, no trailing junk, no silent wrap-around), unlike strtoull.
 */
#ifndef COOP_TRACE_TEXT_NUMBER_H
#define COOP_TRACE_TEXT_NUMBER_H

#include <stdint.h>

enum text_number_result {
    TEXT_NUMBER_OK = 0,
    TEXT_NUMBER_INVALID,  /* empty, or not only digits */
    TEXT_NUMBER_OVERFLOW, /* does not fit the type */
    TEXT_NUMBER_NEGATIVE, /* "-digits", not zero, where an unsigned number is wanted */
    TEXT_NUMBER_SIGNED    /* zero with a minus sign ("-0"): no negative, but signed */
};

/* Decimal digits, or 0x / 0X and hexadecimal digits. */
enum text_number_result text_parse_u64(const char *s, uint64_t *out);

/* As text_parse_u64 with an optional leading '-' (decimal only then). */
enum text_number_result text_parse_i64(const char *s, int64_t *out);

#endif
