/* Reading (possibly gzip-compressed) trace files by line or whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "trace/event.h"
#include "trace/input.h"
#include "trace/spool.h"
#include "trace/text_number.h"
#include "utf8.h"

#define READ_CHUNK ((size_t)1 << 16)
#define SLURP_STEP ((size_t)16 << 20)

/* zlib reports a truncated stream as a short read with Z_BUF_ERROR set, not
 * as -1, so every short read is followed by a look at gzerror. */
static coop_status gz_failure(gzFile gz, const char *path, uint64_t line)
{
    int err = Z_OK;
    const char *msg = gzerror(gz, &err);
    if (err == Z_OK)
        return COOP_OK;
    /* zlib's own messages start with the path it was given, or "<fd:N>"
     * for a descriptor (gzdopen: the held file, a kept pipe): drop it, the
     * message names the file once, below */
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        msg += n + 2;
    else if (strncmp(msg, "<fd:", 4) == 0 && msg[n = strcspn(msg, ">")] == '>' &&
             msg[n + 1] == ':' && msg[n + 2] == ' ')
        msg += n + 3;
    /* zlib's buffers not allocated is no fault of the file's (exit 1, not
     * the 2 of bad input) */
    coop_status st = COOP_ERR_INVALID;
    if (err == Z_ERRNO) {
        st = errno == ENOMEM ? COOP_ERR_HOST_NOMEM : st;
        msg = strerror(errno);
    } else if (err == Z_MEM_ERROR) {
        st = COOP_ERR_HOST_NOMEM;
        msg = "out of host memory";
    } else if (err == Z_BUF_ERROR) {
        msg = "file is truncated (gzip stream ends early)";
    }
    if (line)
        return coop_set_error(st, "%s:%llu: read error: %s", path, (unsigned long long)line, msg);
    return coop_set_error(st, "%s: read error: %s", path, msg);
}

/* After a read that got nothing (got 0) or failed (got < 0), outside a
 * line's context: zlib's failure if it records one, else a failed read is
 * a bare read error and an empty one the stream's end (COOP_OK). */
static coop_status short_read(gzFile gz, const char *path, int got)
{
    coop_status st = gz_failure(gz, path, 0);
    if (st == COOP_OK && got < 0)
        st = coop_set_error(COOP_ERR_INVALID, "%s: read error", path);
    return st;
}

/* After a read: refuses a gzip stream inflating past TRACE_INPUT_BOMB_RATIO
 * (input.h). Plain files (zlib passes them through) are not limited. */
static coop_status check_inflation(gzFile gz, const char *path, uint64_t line)
{
    z_off_t out = gztell(gz), in = gzoffset(gz);
    if (gzdirect(gz) || out < 0 || (uint64_t)out <= TRACE_INPUT_BOMB_MIN || in <= 0 ||
        (uint64_t)out / (uint64_t)in <= TRACE_INPUT_BOMB_RATIO)
        return COOP_OK;
    char where[32] = "";
    if (line)
        snprintf(where, sizeof where, ":%llu", (unsigned long long)line);
    return coop_set_error(COOP_ERR_INVALID,
                          "%s%s: %llu bytes inflated from %llu compressed, over %dx: refused as "
                          "a gzip bomb (real traces compress 3-20x; gunzip it to read it anyway)",
                          path, where, (unsigned long long)out, (unsigned long long)in,
                          TRACE_INPUT_BOMB_RATIO);
}

/* A zlib stream just opened (gz), or why it could not be: zlib's state not
 * allocated (errno ENOMEM, or none), or the file's own errno. */
static coop_status gz_opened(gzFile gz, const char *path, gzFile *out)
{
    char shown[TRACE_INPUT_SHOWN_PATH];
    if (!gz)
        return coop_set_error(errno && errno != ENOMEM ? COOP_ERR_INVALID : COOP_ERR_HOST_NOMEM,
                              "%s: cannot open: %s", trace_input_shown_path(shown, path),
                              errno && errno != ENOMEM ? strerror(errno) : "out of host memory");
    gzbuffer(gz, 1u << 17);
    *out = gz;
    return COOP_OK;
}

/* A zlib stream reading fd (path's), which it owns from then on: closed
 * here when zlib cannot take it. */
static coop_status gz_over_fd(int fd, const char *path, gzFile *out)
{
    errno = 0;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return gz_opened(gz, path, out);
}

static coop_status open_gz(const char *path, gzFile *out)
{
    int kept; /* a pipe read once already (spool.h) */
    coop_status st = trace_spool_open(path, &kept);
    if (st != COOP_OK)
        return st;
    if (kept >= 0)
        return gz_over_fd(kept, path, out);
    errno = 0;
    return gz_opened(gzopen(path, "rb"), path, out);
}

const char *trace_input_shown_path(char out[TRACE_INPUT_SHOWN_PATH], const char *path)
{
    size_t len = strlen(path);
    if (len < TRACE_INPUT_SHOWN_PATH)
        return path;
    /* keep = start + "..." + end + NUL, the end for the file's own name */
    const size_t keep = (TRACE_INPUT_SHOWN_PATH - 4) / 2;
    size_t head = utf8_whole_prefix(path, keep);
    size_t tail = len - keep;
    while (tail < len && ((unsigned char)path[tail] & 0xc0) == 0x80)
        tail++; /* not inside a character */
    memcpy(out, path, head);
    memcpy(out + head, "...", 3);
    memcpy(out + head + 3, path + tail, len - tail + 1);
    return out;
}

coop_status trace_input_check(const char *path)
{
    char shown[TRACE_INPUT_SHOWN_PATH];
    struct stat st;
    if (stat(path, &st) != 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s",
                              trace_input_shown_path(shown, path), strerror(errno));
    if (S_ISDIR(st.st_mode))
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s",
                              trace_input_shown_path(shown, path), strerror(EISDIR));
    if (!S_ISREG(st.st_mode))
        return COOP_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s",
                              trace_input_shown_path(shown, path), strerror(errno));
    close(fd);
    return COOP_OK;
}

/* Magic numbers of compressors zlib does not read (their own specs). */
static const struct {
    const char *name;
    const char *magic;
    size_t len;
} other_compressors[] = {
    {"zstd", "\x28\xb5\x2f\xfd", 4},
    {"xz",
     "\xfd"
     "7zXZ\x00",
     6},
    {"lz4", "\x04\x22\x4d\x18", 4},
    {"lz4", "\x02\x21\x4c\x18", 4}, /* the legacy frame (lz4 -l) */
};

coop_status trace_input_check_start(const char *path, const unsigned char *p, size_t n)
{
    const char *name = NULL;
    for (size_t i = 0; i < sizeof other_compressors / sizeof other_compressors[0]; i++)
        if (n >= other_compressors[i].len &&
            !memcmp(p, other_compressors[i].magic, other_compressors[i].len))
            name = other_compressors[i].name;
    /* "BZh" and a block size digit: text cannot start so and be a trace */
    if (n >= 4 && !memcmp(p, "BZh", 3) && p[3] >= '1' && p[3] <= '9')
        name = "bzip2";
    /* zstd's skippable frames, 0x184D2A50..0x184D2A5F little-endian (what
     * pzstd and seekable zstd files start with) */
    if (n >= 4 && (p[0] & 0xf0) == 0x50 && !memcmp(p + 1, "\x2a\x4d\x18", 3))
        name = "zstd";
    /* a zip archive's local file header, or the end record of an empty one:
     * an archive holds files, so it is extracted rather than decompressed */
    if (n >= 4 && (!memcmp(p, "PK\x03\x04", 4) || !memcmp(p, "PK\x05\x06", 4)))
        return coop_set_error(COOP_ERR_INVALID,
                              "%s: a zip archive: coop reads plain files and gzip only: extract "
                              "it first (unzip)",
                              path);
    if (!name)
        return COOP_OK;
    return coop_set_error(COOP_ERR_INVALID,
                          "%s: compressed with %s: coop reads plain files and gzip only: "
                          "decompress it first (%s -d)",
                          path, name, name);
}

size_t trace_input_bom_length(const unsigned char *p, size_t n)
{
    return n >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf ? 3 : 0;
}

void trace_input_escape(char *out, size_t cap, const char *text)
{
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        /* a UTF-8 character is copied whole or not at all: a cut inside
         * one left a stray byte (invalid UTF-8) at the message's end */
        size_t n = *p >= 0x80 ? utf8_sequence_length(p) : 1;
        int control = *p < 0x20 || *p == 0x7f;
        if (k + (control ? 4 : n ? n : 1) >= cap)
            break;
        if (control) {
            k += (size_t)snprintf(out + k, cap - k, "\\x%02x", *p++);
        } else if (n) {
            memcpy(out + k, p, n);
            k += n;
            p += n;
        } else { /* not UTF-8: the byte as the file holds it */
            out[k++] = (char)*p++;
        }
    }
    out[k] = '\0';
}

coop_status trace_input_error(const trace_input *in, const char *fmt, ...)
{
    char what[384], shown[512];
    va_list ap;
    va_start(ap, fmt);
    coop_vformat_message(what, sizeof what, fmt, ap); /* cut between characters */
    va_end(ap);
    trace_input_escape(shown, sizeof shown, what);
    return coop_set_error(COOP_ERR_INVALID, "%s:%llu: %s", in->path, (unsigned long long)in->line,
                          shown);
}

coop_status trace_input_u64(const trace_input *in, const char *name, const char *text,
                            uint64_t *out)
{
    switch (text_parse_u64(text, out)) {
    case TEXT_NUMBER_OK:
        return COOP_OK;
    case TEXT_NUMBER_OVERFLOW:
        return trace_input_error(in, "%s '%s' is out of range (at most 2^64-1)", name, text);
    case TEXT_NUMBER_NEGATIVE:
        return trace_input_error(in, "%s '%s' is negative", name, text);
    case TEXT_NUMBER_SIGNED:
        return trace_input_error(in, "%s '%s' is not an unsigned number (no sign allowed)", name,
                                 text);
    default:
        return trace_input_error(in, "%s '%s' is not a number", name, text[0] ? text : "(empty)");
    }
}

coop_status trace_input_size(const trace_input *in, const char *name, const char *text,
                             uint64_t *out)
{
    coop_status st = trace_input_u64(in, name, text, out);
    if (st == COOP_OK && *out >= TRACE_SIZE_LIMIT)
        return trace_input_error(in, "%s %llu is too large (sizes must be below 2^56)", name,
                                 (unsigned long long)*out);
    return st;
}

coop_status trace_input_open(trace_input *in, const char *path)
{
    *in = (trace_input){0};
    in->path = path;
    coop_status st = open_gz(path, &in->gz);
    if (st != COOP_OK)
        return st;
    in->cap = READ_CHUNK * 2;
    in->buf = malloc(in->cap);
    if (!in->buf) {
        trace_input_close(in);
        return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
    }
    return COOP_OK;
}

void trace_input_close(trace_input *in)
{
    if (in->gz)
        gzclose(in->gz);
    free(in->buf);
    *in = (trace_input){0};
}

/* Moves unconsumed bytes to the front and appends up to READ_CHUNK more,
 * growing the buffer while one line does not fit. Sets at_eof at the end. */
static coop_status fill(trace_input *in)
{
    if (in->start > 0) {
        memmove(in->buf, in->buf + in->start, in->end - in->start);
        in->end -= in->start;
        in->start = 0;
    }
    if (in->cap - in->end < READ_CHUNK + 1) {
        size_t cap = in->cap * 2;
        char *buf = realloc(in->buf, cap);
        if (!buf)
            return coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", in->path);
        in->buf = buf;
        in->cap = cap;
    }
    int got = gzread(in->gz, in->buf + in->end, (unsigned)READ_CHUNK);
    /* a file that fails before its first byte (a directory) has no line to
     * blame: the message names the file alone */
    uint64_t line = in->line == 0 && in->end == 0 ? 0 : in->line + 1;
    if (got < 0)
        return gz_failure(in->gz, in->path, line);
    if (got == 0) {
        coop_status st = gz_failure(in->gz, in->path, line);
        if (st != COOP_OK)
            return st;
        in->at_eof = 1;
    }
    int first = in->line == 0 && in->end == 0 && in->start == 0;
    in->end += (size_t)got;
    if (first && got > 0) {
        coop_status st = trace_input_check_start(in->path, (unsigned char *)in->buf, in->end);
        if (st != COOP_OK)
            return st;
        in->start = trace_input_bom_length((unsigned char *)in->buf, in->end);
    }
    return got > 0 ? check_inflation(in->gz, in->path, line) : COOP_OK;
}

coop_status trace_input_line(trace_input *in, char **line, size_t *len)
{
    *line = NULL;
    *len = 0;
    size_t scanned = 0; /* bytes after start already known to hold no '\n' */
    for (;;) {
        char *begin = in->buf + in->start;
        size_t avail = in->end - in->start;
        char *nl = memchr(begin + scanned, '\n', avail - scanned);
        size_t n = nl ? (size_t)(nl - begin) : avail;
        if (n > TRACE_INPUT_MAX_LINE)
            return coop_set_error(COOP_ERR_INVALID, "%s:%llu: line longer than %zu bytes", in->path,
                                  (unsigned long long)in->line + 1, TRACE_INPUT_MAX_LINE);
        if (!nl && in->at_eof && avail > 0)
            return coop_set_error(COOP_ERR_INVALID,
                                  "%s:%llu: the last line has no newline: the file looks "
                                  "truncated",
                                  in->path, (unsigned long long)in->line + 1);
        if (nl) {
            in->line++;
            in->start += n + 1;
            if (n > 0 && begin[n - 1] == '\r')
                n--;
            begin[n] = '\0'; /* overwrites the '\n' */
            if (memchr(begin, '\0', n))
                return coop_set_error(COOP_ERR_INVALID,
                                      "%s:%llu: NUL byte in a text line (binary data?)", in->path,
                                      (unsigned long long)in->line);
            *line = begin;
            *len = n;
            return COOP_OK;
        }
        if (in->at_eof)
            return COOP_OK;
        scanned = avail;
        coop_status st = fill(in);
        if (st != COOP_OK)
            return st;
    }
}

/* trace_input_slurp's reads, into a buffer growing to hold the whole file
 * (piece NULL) or, for trace_input_each, into one of SLURP_STEP bytes handed
 * to piece after each read: the same reads of the same sizes (cap grows
 * as the slurp's buffer would), so the same refusals at the same bytes. */
static coop_status read_whole(const char *path, gzFile gz,
                              coop_status (*piece)(void *, const unsigned char *, size_t),
                              void *ctx, unsigned char **data, size_t *len)
{
    *len = 0;
    coop_status st = COOP_OK;
    size_t cap = (size_t)1 << 20, n = 0;
    unsigned char *buf = malloc((piece ? SLURP_STEP : cap) + 1);
    for (;;) {
        if (!buf) {
            st = coop_set_error(COOP_ERR_HOST_NOMEM, "%s: out of memory", path);
            break;
        }
        if (cap - n < READ_CHUNK) {
            if (cap >= TRACE_INPUT_MAX_SLURP) {
                st = coop_set_error(COOP_ERR_INVALID, "%s: larger than %zu bytes uncompressed",
                                    path, TRACE_INPUT_MAX_SLURP);
                break;
            }
            unsigned char *grown = piece ? buf : realloc(buf, cap * 2 + 1);
            if (!grown) {
                st =
                    coop_set_error(COOP_ERR_HOST_NOMEM,
                                   "%s: byte %zu: out of memory (reading the file whole)", path, n);
                break;
            }
            buf = grown;
            cap *= 2;
        }
        /* reads of at most SLURP_STEP, so that an inflating stream is
         * caught within that much of the bomb limit */
        size_t want = cap - n < SLURP_STEP ? cap - n : SLURP_STEP;
        unsigned char *to = piece ? buf : buf + n;
        int got = gzread(gz, to, (unsigned)want);
        if (got <= 0) {
            st = short_read(gz, path, got);
            break;
        }
        n += (size_t)got;
        if ((st = check_inflation(gz, path, 0)) != COOP_OK)
            break;
        if (piece && (st = piece(ctx, to, (size_t)got)) != COOP_OK)
            break;
    }
    gzclose(gz);
    if (st != COOP_OK || piece || !data) { /* (data: NULL exactly when piece is not) */
        free(buf);
        *len = st == COOP_OK ? n : 0;
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return COOP_OK;
}

coop_status trace_input_slurp(const char *path, unsigned char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    gzFile gz = NULL; /* set by open_gz; initialized for -O3's maybe-uninitialized */
    coop_status st = open_gz(path, &gz);
    return st == COOP_OK ? read_whole(path, gz, NULL, NULL, data, len) : st;
}

int trace_input_rereadable(trace_input_stream *s, const char *path)
{
    *s = (trace_input_stream){.path = path, .fd = -1};
    struct stat named;
    if (stat(path, &named) != 0 || !S_ISREG(named.st_mode))
        return 0;
    /* O_NONBLOCK: should a FIFO take the name since the stat, its open
     * neither waits for a writer nor is kept (fstat below) */
    s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0 || fstat(s->fd, &s->was) != 0 || !S_ISREG(s->was.st_mode)) {
        trace_input_stream_close(s);
        return 0;
    }
    return 1;
}

/* A read of the held file from its first byte, through a descriptor of its
 * own (gzclose closes it) sharing the held one's offset: the reads are one
 * after the other. */
static coop_status open_held(trace_input_stream *s, gzFile *out)
{
    int fd = -1;
    errno = 0;
    if (lseek(s->fd, 0, SEEK_SET) != 0 || (fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        char shown[TRACE_INPUT_SHOWN_PATH];
        return coop_set_error(COOP_ERR_INVALID, "%s: cannot open: %s",
                              trace_input_shown_path(shown, s->path), strerror(errno));
    }
    return gz_over_fd(fd, s->path, out);
}

/* One word into the hash: a rotation and a multiplication by an odd
 * constant (the golden ratio's fraction, 2^64 / phi) mix the bits upward and
 * back down, each step a bijection of h and of w. */
static uint64_t hash_word(uint64_t h, uint64_t w)
{
    return ((h << 23 | h >> 41) ^ w) * UINT64_C(0x9e3779b97f4a7c15);
}

void trace_input_hash_bytes(trace_input_hash *x, const unsigned char *p, size_t n)
{
    uint64_t w;
    while (n && x->have) { /* the word the last piece began */
        x->part[x->have++] = *p++;
        n--;
        if (x->have == 8) {
            memcpy(&w, x->part, 8);
            x->h = hash_word(x->h, w);
            x->have = 0;
        }
    }
    uint64_t h = x->h;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = hash_word(h, w);
    }
    x->h = h;
    memcpy(x->part + x->have, p, n); /* n < 8 here, or have is 0 */
    x->have += (unsigned)n;
}

int trace_input_hash_equal(const trace_input_hash *a, const trace_input_hash *b)
{
    return a->h == b->h && a->have == b->have && !memcmp(a->part, b->part, a->have);
}

/* trace_input_each's piece: the first read's hash, then the caller's. */
typedef struct {
    trace_input_stream *s;
    coop_status (*piece)(void *ctx, const unsigned char *p, size_t n);
    void *ctx;
} each_piece;

static coop_status count_piece(void *ctx, const unsigned char *p, size_t n)
{
    each_piece *e = ctx;
    trace_input_hash_bytes(&e->s->first, p, n);
    return e->piece(e->ctx, p, n);
}

coop_status trace_input_each(trace_input_stream *s,
                             coop_status (*piece)(void *ctx, const unsigned char *p, size_t n),
                             void *ctx, size_t *len)
{
    *len = 0;
    s->first = (trace_input_hash){0};
    gzFile gz = NULL;
    coop_status st = open_held(s, &gz);
    if (st != COOP_OK)
        return st;
    each_piece e = {s, piece, ctx};
    st = read_whole(s->path, gz, count_piece, &e, NULL, len);
    s->len = *len;
    return st;
}

void (*trace_input_reread_hook)(const char *path);
void (*trace_input_second_read_hook)(const char *path, unsigned char *p, size_t n);

/* Whether fstat of the held file still gives the size and modification
 * time it gave before the first read. Not the change time: a rename over
 * the file's path (or a link) moves it without touching a byte. A write
 * that sets the modification time back, or falls in the tick of the one
 * before, is left to the hash (trace_input_stream_finish). */
static int unchanged(const trace_input_stream *s)
{
    struct stat now;
    return fstat(s->fd, &now) == 0 && now.st_size == s->was.st_size &&
           now.st_mtim.tv_sec == s->was.st_mtim.tv_sec &&
           now.st_mtim.tv_nsec == s->was.st_mtim.tv_nsec;
}

static coop_status changed(const trace_input_stream *s, const char *how)
{
    char shown[TRACE_INPUT_SHOWN_PATH];
    return coop_set_error(COOP_ERR_INVALID, "%s: the file changed while it was read: %s",
                          trace_input_shown_path(shown, s->path), how);
}

coop_status trace_input_stream_open(trace_input_stream *s)
{
    if (trace_input_reread_hook)
        trace_input_reread_hook(s->path);
    s->got = 0;
    s->second = (trace_input_hash){0};
    coop_status st = open_held(s, &s->gz);
    if (st != COOP_OK)
        return st;
    if (!unchanged(s))
        return changed(s, "modified between its first read and its second");
    return COOP_OK;
}

coop_status trace_input_stream_read(trace_input_stream *s, unsigned char *buf, size_t cap,
                                    size_t *got)
{
    *got = 0;
    while (cap) {
        unsigned want = cap < SLURP_STEP ? (unsigned)cap : (unsigned)SLURP_STEP;
        int n = gzread(s->gz, buf, want);
        if (n <= 0)
            return short_read(s->gz, s->path, n);
        if (trace_input_second_read_hook)
            trace_input_second_read_hook(s->path, buf, (size_t)n);
        trace_input_hash_bytes(&s->second, buf, (size_t)n);
        s->got += (uint64_t)n;
        *got += (size_t)n;
        buf += n;
        cap -= (size_t)n;
    }
    return COOP_OK;
}

/* Reads what is left of the held file, to one byte past the first read's
 * length: the rest (the bytes after a pickle's STOP), and a file grown
 * shows without being read to its end. */
static coop_status read_rest(trace_input_stream *s)
{
    unsigned char rest[4096];
    size_t got;
    do {
        if (s->got > s->len)
            break;
        uint64_t left = s->len + 1 - s->got;
        coop_status st =
            trace_input_stream_read(s, rest, left < sizeof rest ? (size_t)left : sizeof rest, &got);
        if (st != COOP_OK)
            return st;
    } while (got);
    return COOP_OK;
}

/* Whether the file changed while it was read, as an error (COOP_OK if not
 * seen), once read_rest is done: its times or size moved, or, where read
 * gave the second read's end (read_rest succeeded), another length or
 * hash. */
static coop_status change_seen(const trace_input_stream *s, int read)
{
    if (!unchanged(s))
        return changed(s, "modified during its second read");
    if (read && (s->got != s->len || !trace_input_hash_equal(&s->first, &s->second)))
        return changed(s, "its second read did not give the bytes of its first");
    return COOP_OK;
}

coop_status trace_input_stream_finish(trace_input_stream *s)
{
    /* a read of the rest that fails (a gzip file cut during the read) is
     * still checked with fstat: the change is what went wrong */
    coop_status st = read_rest(s);
    coop_status change = change_seen(s, st == COOP_OK);
    return change != COOP_OK ? change : st;
}

coop_status trace_input_stream_failed(trace_input_stream *s, coop_status failed)
{
    coop_error_kept kept;
    coop_error_keep(&kept);
    coop_status change = change_seen(s, read_rest(s) == COOP_OK);
    if (change != COOP_OK)
        return change;
    coop_error_restore(&kept);
    return failed;
}

void trace_input_stream_close(trace_input_stream *s)
{
    if (s->gz)
        gzclose(s->gz);
    s->gz = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

coop_status trace_input_peek(const char *path, unsigned char *buf, size_t cap, size_t *len)
{
    *len = 0;
    gzFile gz = NULL;
    coop_status st = open_gz(path, &gz);
    if (st != COOP_OK)
        return st;
    int got = cap ? gzread(gz, buf, (unsigned)cap) : 0;
    /* A peek that got bytes is fine even if the stream breaks later: the
     * reader that reads the whole file reports that with its position. */
    if (got <= 0)
        st = short_read(gz, path, got);
    if (got > 0)
        *len = (size_t)got;
    gzclose(gz);
    return st;
}
