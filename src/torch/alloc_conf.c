/* COOP_ALLOC_CONF parsing (see alloc_conf.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "byte_size.h"
#include "status.h"
#include "torch/alloc_conf.h"
#include "torch/c_numeric.h"
#include "utf8.h"

void coop_alloc_conf_default(coop_alloc_conf *conf)
{
    memset(conf, 0, sizeof *conf);
    conf->backend = COOP_BACKEND_CUDA;
    conf->use_vmm = true;
    conf->placement = COOP_ALLOC_LOW;
}

/* A token of the input: [start, start+len), at byte offset off. */
typedef struct token {
    const char *start;
    size_t len;
    size_t off;
} token;

/* Room for a token shown in a message. A message quotes at most two (a
 * value and its key) in under 200 bytes of its own text, so two full ones
 * still fit in COOP_ERROR_MAX: the message is never cut by its buffer,
 * which would cut inside an escape ("\x1b" read as "\x1") and drop the
 * text after the value. And one (an unknown key, a bad value of a known
 * key) fits with it in the 512 bytes coop.torch keeps a message in. */
#define SHOWN_MAX 256
_Static_assert(2 * SHOWN_MAX + 200 < COOP_ERROR_MAX, "two shown tokens fit in a message");
_Static_assert(SHOWN_MAX + 200 < 512, "one shown token fits in coop.torch's 512 bytes");

/* t's text for a message, control characters written \xNN (a newline or
 * an escape inside a key or value: trimming takes them at the ends only),
 * so that stderr shows what was given instead of obeying it: C0, DEL, and
 * C1 (U+0080..U+009F: U+009B is a terminal's CSI, as ESC [ is), and a byte
 * that is not UTF-8 (Latin-1's e9, or a raw C1 byte), which a message also
 * could not carry as text (Python reads it as U+FFFD). Other UTF-8 text is
 * shown as is. Cut where buf (SHOWN_MAX bytes) is full, between characters
 * and escapes. Returns buf. */
static const char *shown(const token *t, char *buf)
{
    const unsigned char *p = (const unsigned char *)t->start;
    size_t k = 0;
    for (size_t i = 0; i < t->len;) {
        size_t n = p[i] >= 0x80 ? utf8_sequence_length(p + i) : 1;
        if (n > t->len - i)
            n = 0;
        bool escaped = p[i] < 0x20 || p[i] == 0x7f || n == 0 || (p[i] == 0xc2 && p[i + 1] < 0xa0);
        if (!n)
            n = 1;
        if (k + (escaped ? 4 * n : n) >= SHOWN_MAX)
            break;
        for (size_t j = 0; j < n; j++)
            if (escaped)
                k += (size_t)snprintf(buf + k, SHOWN_MAX - k, "\\x%02x", p[i + j]);
            else
                buf[k++] = (char)p[i + j];
        i += n;
    }
    buf[k] = '\0';
    return buf;
}

static bool token_is(const token *t, const char *word)
{
    return strlen(word) == t->len && strncasecmp(t->start, word, t->len) == 0;
}

static token trim(const char *text, size_t begin, size_t end)
{
    while (begin < end && isspace((unsigned char)text[begin]))
        begin++;
    while (end > begin && isspace((unsigned char)text[end - 1]))
        end--;
    return (token){text + begin, end - begin, begin};
}

static bool parse_bool(const token *v, bool *out)
{
    if (token_is(v, "true") || token_is(v, "1") || token_is(v, "yes")) {
        *out = true;
        return true;
    }
    if (token_is(v, "false") || token_is(v, "0") || token_is(v, "no")) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_fraction(const token *v, double *out)
{
    char buf[64];
    if (v->len == 0 || v->len >= sizeof buf)
        return false;
    memcpy(buf, v->start, v->len);
    buf[v->len] = '\0';
    char *end = NULL;
    /* errno is not read: strtod's ERANGE for a subnormal (1e-310) would
     * refuse a number in (0, 1]; past the doubles' range it gives 0 or
     * inf, which the range check refuses */
    double f = c_numeric_strtod(buf, &end);
    if (*end != '\0' || !isfinite(f) || f <= 0.0 || f > 1.0)
        return false;
    *out = f;
    return true;
}

static bool parse_count(const token *v, size_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (!isdigit((unsigned char)v->start[i]))
            return false;
        /* exact: n * 10 + digit must not pass SIZE_MAX (every size_t parses) */
        size_t digit = (size_t)(v->start[i] - '0');
        if (n > (SIZE_MAX - digit) / 10)
            return false;
        n = n * 10 + digit;
    }
    if (v->len == 0)
        return false;
    *out = n;
    return true;
}

static coop_status bad_value(const token *key, const token *value, const char *expected)
{
    char v[SHOWN_MAX], k[SHOWN_MAX];
    return coop_set_error(COOP_ERR_INVALID,
                          "COOP_ALLOC_CONF: bad value '%s' for key '%s' at byte %zu: expected %s",
                          shown(value, v), shown(key, k), value->off, expected);
}

/* A size a pool can take, or bad_value's refusal naming what was expected:
 * coop_pool_create refuses 2^BLOCK_SIZE_BITS and above, so such a value is
 * refused here, naming its key, rather than parsing and then failing every
 * allocation of every device; so is one past 2^64 (too large, not "no size") */
_Static_assert(BLOCK_SIZE_BITS == 56, "parse_size's message says 2^56");
static coop_status parse_size(const token *k, const token *v, uint64_t *out, const char *expected)
{
    uint64_t bytes = 0;
    byte_size_result r = byte_size_scan(v->start, v->len, &bytes);
    if (r == BYTE_SIZE_MALFORMED)
        return bad_value(k, v, expected);
    if (r == BYTE_SIZE_TOO_LARGE || bytes >= UINT64_C(1) << BLOCK_SIZE_BITS)
        return bad_value(k, v, "a size below 2^56 bytes (64 PiB)");
    *out = bytes;
    return COOP_OK;
}

/* 0 is refused too (coop_config reads it as "the default"): "above 0" says so */
#define SIZE_EXPECTED "a byte count above 0 such as 512M, 40G or 1Ti"
/* the spellings parse_bool takes, all of them */
#define BOOL_EXPECTED "true or false (or 1 / 0, yes / no)"

/* Applies one key:value to conf; *seen_bit marks the key for duplicates. */
static coop_status apply(coop_alloc_conf *conf, const token *k, const token *v, unsigned *seen)
{
    static const char *const keys[] = {"backend", "capacity", "fraction",  "page",
                                       "vmm",     "segment",  "placement", "min_split",
                                       "check",   "history",  "wait"};
    unsigned index = 0;
    while (index < sizeof keys / sizeof keys[0] && !token_is(k, keys[index]))
        index++;
    char key[SHOWN_MAX];
    if (index == sizeof keys / sizeof keys[0])
        return coop_set_error(COOP_ERR_INVALID,
                              "COOP_ALLOC_CONF: unknown key '%s' at byte %zu (known: backend, "
                              "capacity, fraction, page, vmm, segment, placement, min_split, "
                              "check, history, wait)",
                              shown(k, key), k->off);
    if (*seen & (1u << index))
        return coop_set_error(COOP_ERR_INVALID, "COOP_ALLOC_CONF: key '%s' given twice (byte %zu)",
                              shown(k, key), k->off);
    *seen |= 1u << index;

    uint64_t bytes = 0;
    coop_status st = COOP_OK;
    const char *name = keys[index];
    /* "default" for the byte keys whose default is the device's or the
     * pool's (0 in coop_alloc_conf): the spelling coop_torch_settings
     * writes for them, so that its text parses back; 0 itself stays
     * refused, as it reads as zero bytes */
    bool byte_key = strcmp(name, "capacity") == 0 || strcmp(name, "page") == 0 ||
                    strcmp(name, "segment") == 0 || strcmp(name, "min_split") == 0;
    if (byte_key && token_is(v, "default"))
        return COOP_OK;
    if (strcmp(name, "backend") == 0) {
        if (token_is(v, "cuda"))
            conf->backend = COOP_BACKEND_CUDA;
        else if (token_is(v, "host"))
            conf->backend = COOP_BACKEND_HOST;
        else
            return bad_value(k, v, "cuda or host");
    } else if (strcmp(name, "capacity") == 0) {
        return parse_size(k, v, &conf->capacity, SIZE_EXPECTED);
    } else if (strcmp(name, "fraction") == 0) {
        if (!parse_fraction(v, &conf->fraction))
            return bad_value(k, v, "a number in (0, 1] such as 0.8");
    } else if (strcmp(name, "page") == 0) {
        static const char page_expected[] = "a power of two >= 512 such as 2M";
        if ((st = parse_size(k, v, &bytes, page_expected)) != COOP_OK)
            return st;
        if (bytes < 512 || (bytes & (bytes - 1)))
            return bad_value(k, v, page_expected);
        conf->page_size = bytes;
    } else if (strcmp(name, "vmm") == 0) {
        if (!parse_bool(v, &conf->use_vmm))
            return bad_value(k, v, BOOL_EXPECTED);
    } else if (strcmp(name, "segment") == 0) {
        return parse_size(k, v, &conf->segment_size, SIZE_EXPECTED);
    } else if (strcmp(name, "placement") == 0) {
        if (token_is(v, "low"))
            conf->placement = COOP_ALLOC_LOW;
        else if (token_is(v, "high"))
            conf->placement = COOP_ALLOC_HIGH;
        else
            return bad_value(k, v, "low or high");
    } else if (strcmp(name, "min_split") == 0) {
        static const char split_expected[] = "a multiple of 512 bytes above 0 such as 512 or 1M";
        if ((st = parse_size(k, v, &bytes, split_expected)) != COOP_OK)
            return st;
        if (bytes % 512)
            return bad_value(k, v, split_expected);
        conf->min_split = bytes;
    } else if (strcmp(name, "check") == 0) {
        if (!parse_bool(v, &conf->check))
            return bad_value(k, v, BOOL_EXPECTED);
    } else if (strcmp(name, "wait") == 0) {
        bool wait = true;
        if (!parse_bool(v, &wait))
            return bad_value(k, v, BOOL_EXPECTED);
        conf->never_wait = !wait;
    } else { /* history */
        bool on = false;
        if (parse_bool(v, &on) && !(v->len == 1 && v->start[0] == '1'))
            conf->history = on ? COOP_ALLOC_CONF_DEFAULT_HISTORY : 0;
        else if (!parse_count(v, &conf->history))
            return bad_value(k, v, "true, false or a number of events such as 50000");
    }
    return COOP_OK;
}

coop_status coop_alloc_conf_parse(const char *text, coop_alloc_conf *out)
{
    coop_alloc_conf conf;
    coop_alloc_conf_default(&conf);
    unsigned seen = 0;
    /* the capacity and fraction keys as given, for the message when both are */
    token capacity_key = {NULL, 0, 0}, fraction_key = {NULL, 0, 0};
    size_t n = text ? strlen(text) : 0;
    size_t begin = 0;
    while (begin < n) {
        size_t end = begin;
        while (end < n && text[end] != ',')
            end++;
        token item = trim(text, begin, end);
        if (item.len > 0) {
            const char *colon = memchr(item.start, ':', item.len);
            char shown_item[SHOWN_MAX];
            if (!colon)
                return coop_set_error(COOP_ERR_INVALID,
                                      "COOP_ALLOC_CONF: '%s' at byte %zu has no value "
                                      "(expected key:value)",
                                      shown(&item, shown_item), item.off);
            size_t colon_at = (size_t)(colon - text);
            token key = trim(text, item.off, colon_at);
            token value = trim(text, colon_at + 1, item.off + item.len);
            if (key.len == 0)
                return coop_set_error(COOP_ERR_INVALID,
                                      "COOP_ALLOC_CONF: missing key before ':' at byte %zu",
                                      colon_at);
            coop_status st = apply(&conf, &key, &value, &seen);
            if (st != COOP_OK)
                return st;
            if (token_is(&key, "capacity"))
                capacity_key = key;
            else if (token_is(&key, "fraction"))
                fraction_key = key;
        }
        begin = end + 1;
    }
    if (conf.capacity && conf.fraction > 0.0) {
        char c[SHOWN_MAX], f[SHOWN_MAX];
        return coop_set_error(COOP_ERR_INVALID,
                              "COOP_ALLOC_CONF: '%s' (byte %zu) and '%s' (byte %zu) are "
                              "exclusive: give one",
                              shown(&capacity_key, c), capacity_key.off, shown(&fraction_key, f),
                              fraction_key.off);
    }
    *out = conf;
    return COOP_OK;
}

void coop_alloc_conf_to_config(const coop_alloc_conf *conf, int device, coop_config *config)
{
    coop_config_default(config);
    config->backend = conf->backend;
    config->device = device;
    config->capacity = conf->capacity;
    config->page_size = conf->page_size;
    config->use_vmm = conf->use_vmm;
    config->segment_size = conf->segment_size;
    config->min_split = conf->min_split;
    config->check = conf->check;
    config->never_wait = conf->never_wait;
}
