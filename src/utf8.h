/*
 * Well-formed UTF-8, for the JSON rows of coop replay and coop sim: a file
 * name may hold any bytes, and JSON text is UTF-8, so the bytes of a name
 * that are not are written as U+FFFD. And for messages cut to fit a buffer:
 * a cut inside a character leaves bytes that are no character at all.
 */
#ifndef COOP_UTF8_H
#define COOP_UTF8_H

#include <stddef.h>

/* The length (1 to 4) of the well-formed UTF-8 sequence at p, NUL-ended;
 * 0 where p starts no such sequence (a stray continuation byte, an
 * overlong form, a surrogate, a code point beyond U+10FFFF, a sequence cut
 * short). *p must not be NUL. */
static inline size_t utf8_sequence_length(const unsigned char *p)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    /* the second byte's range rules out overlongs (e0, f0), surrogates
     * (ed) and code points past U+10FFFF (f4) */
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (!n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) /* a NUL ends the check too */
            return 0;
    return n;
}

/* The length of text[0..n) less a UTF-8 character cut short at its end
 * (its lead byte and the continuation bytes after it), which is where a
 * message that quotes user text (a name, a path) is cut to fit: what
 * snprintf leaves when it cuts inside a character, or a cut at byte n made
 * on purpose. Only text[0..n) is read; bytes that are not UTF-8 are not
 * judged (kept as they are, as messages show a name's bytes). */
static inline size_t utf8_whole_prefix(const char *text, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = n; /* the last lead byte: at most 3 continuation bytes back */
    while (i > 0 && n - i < 3 && (p[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0 || p[i - 1] < 0xc0)
        return n;
    size_t want = p[i - 1] >= 0xf0 ? 4 : p[i - 1] >= 0xe0 ? 3 : 2;
    return n - (i - 1) < want ? i - 1 : n;
}

#endif
