/* Strict unsigned and signed number parsing for text formats. */
#include "trace/text_number.h"

static int digit_value(char c, unsigned base)
{
    unsigned v;
    if (c >= '0' && c <= '9')
        v = (unsigned)(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f')
        v = (unsigned)(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F')
        v = (unsigned)(c - 'A' + 10);
    else
        return -1;
    return (int)v;
}

enum text_number_result text_parse_u64(const char *s, uint64_t *out)
{
    unsigned base = 10;
    if (s[0] == '-' && digit_value(s[1], 10) >= 0) {
        /* "-0" is no negative number, and "-5x" no number at all */
        uint64_t x;
        enum text_number_result r = text_parse_u64(s + 1, &x);
        if (r == TEXT_NUMBER_INVALID)
            return r;
        return r == TEXT_NUMBER_OK && x == 0 ? TEXT_NUMBER_SIGNED : TEXT_NUMBER_NEGATIVE;
    }
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    if (!*s)
        return TEXT_NUMBER_INVALID;
    uint64_t x = 0;
    int overflow = 0;
    for (; *s; s++) {
        int d = digit_value(*s, base);
        if (d < 0)
            return TEXT_NUMBER_INVALID;
        if (x > (UINT64_MAX - (uint64_t)d) / base)
            overflow = 1; /* keep scanning: junk after digits is INVALID */
        x = x * base + (uint64_t)d;
    }
    if (overflow)
        return TEXT_NUMBER_OVERFLOW;
    *out = x;
    return TEXT_NUMBER_OK;
}

enum text_number_result text_parse_i64(const char *s, int64_t *out)
{
    int negative = s[0] == '-';
    uint64_t x;
    enum text_number_result r = text_parse_u64(s + negative, &x);
    if (r != TEXT_NUMBER_OK)
        return r == TEXT_NUMBER_NEGATIVE || r == TEXT_NUMBER_SIGNED ? TEXT_NUMBER_INVALID : r;
    if (negative) {
        if (x > (uint64_t)INT64_MAX + 1)
            return TEXT_NUMBER_OVERFLOW;
        *out = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
    } else {
        if (x > (uint64_t)INT64_MAX)
            return TEXT_NUMBER_OVERFLOW;
        *out = (int64_t)x;
    }
    return TEXT_NUMBER_OK;
}
