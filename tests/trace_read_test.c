/*
 * Format detection and trace_read's dispatch: by content, never by name,
 * through gzip and through pipes; unknown, empty and missing files give
 * clear errors.
 */
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace_fixture.h"

#include "open_descriptors.h"
#include "test_seed.h"
#include "trace/dtr_log.h"
#include "trace/input.h"
#include "trace/spool.h"

static const char *write_named(const char *name, const void *data, size_t len, int gzip)
{
    static char path[300];
    fixture_path(path, sizeof path, name);
    fixture_write(path, data, len, gzip);
    return path;
}

static const unsigned char tiny_pickle[] = {0x80, 0x04, '}', 0x8c, 13,  'd', 'e',
                                            'v',  'i',  'c', 'e',  '_', 't', 'r',
                                            'a',  'c',  'e', 's',  ']', 's', '.'};

static void test_detect(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        trace_format format;
    } cases[] = {
        {"coop-trace 1\n", TRACE_FORMAT_TEXT},
        {"# comment first\ncoop-trace 1\n", TRACE_FORMAT_TEXT},
        {"\n\n  coop-trace 1\n", TRACE_FORMAT_TEXT},
        {"id,lower,upper,size\n", TRACE_FORMAT_MINIMALLOC},
        {"buffer,start,end,size\r\nb1,0,3,4\n", TRACE_FORMAT_MINIMALLOC},
        {"size,upper,lower,id,gaps\n", TRACE_FORMAT_MINIMALLOC},
        {"buffer_id,lower,upper,size\n", TRACE_FORMAT_MINIMALLOC},
        {"{\"TYPE\": \"ANNOTATE\", \"ANNOTATION\": \"START\"}\n", TRACE_FORMAT_DTR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int gzip = 0; gzip <= 1; gzip++) {
            /* a misleading name: content decides */
            const char *path = write_named("x.pickle", cases[i].text, strlen(cases[i].text), gzip);
            trace_format f;
            assert_int_equal(trace_detect_format(path, &f), COOP_OK);
            assert_int_equal(f, cases[i].format);
        }
    trace_format f;
    const char *path = write_named("x.csv", tiny_pickle, sizeof tiny_pickle, 1);
    assert_int_equal(trace_detect_format(path, &f), COOP_OK);
    assert_int_equal(f, TRACE_FORMAT_PICKLE);
    assert_string_equal(trace_format_name(TRACE_FORMAT_PICKLE), "pickle");
    assert_string_equal(trace_format_name(TRACE_FORMAT_TEXT), "text");
    assert_string_equal(trace_format_name(TRACE_FORMAT_MINIMALLOC), "minimalloc");
    assert_string_equal(trace_format_name(TRACE_FORMAT_DTR), "dtr");
}

static void test_detect_errors(void **state)
{
    (void)state;
    trace_format f;
    trace t;
    const char *path = write_named("unknown.bin",
                                   "\x7f"
                                   "ELF\x02\x01",
                                   6, 0);
    fixture_expect_error(trace_detect_format(path, &f), "unknown.bin: unknown trace format",
                         "starts with \"\\x7fELF\\x02\\x01\"", NULL);
    fixture_expect_error(trace_read(path, &t), "unknown trace format", NULL);
    assert_null(t.events);
    /* a zip archive is named, with the tool to extract it (it was an
     * unknown format showing "PK\x03\x04"); an empty one too */
    path = write_named("t.zip", "PK\x03\x04zip?", 8, 0);
    fixture_expect_error(trace_detect_format(path, &f),
                         "t.zip: a zip archive: coop reads plain files and gzip only: "
                         "extract it first (unzip)",
                         NULL);
    fixture_expect_error(trace_read(path, &t), "t.zip: a zip archive", NULL);
    fixture_expect_error(trace_read_text(path, &t), "t.zip: a zip archive", NULL);
    path = write_named("empty.zip", "PK\x05\x06\0\0\0\0", 8, 0);
    fixture_expect_error(trace_read(path, &t), "empty.zip: a zip archive", NULL);
    /* a CSV header without a size column is no minimalloc file */
    path = write_named("names.csv", "first,last\nAda,Lovelace\n", 25, 0);
    fixture_expect_error(trace_read(path, &t), "unknown trace format", NULL);
    path = write_named("sizes.csv", "sizes,count\n1,2\n", 17, 0);
    fixture_expect_error(trace_read(path, &t), "unknown trace format", NULL);
    /* nor is a lone column, without a comma */
    path = write_named("size.txt", "size\n", 5, 0);
    fixture_expect_error(trace_read(path, &t), "unknown trace format", NULL);
    /* a corrupt deflate stream: zlib's message, without the path zlib puts
     * before it (the message names the file once) */
    path = write_named("bad.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff", 14, 0);
    fixture_expect_error(trace_read(path, &t), "bad.gz: read error: invalid block type", NULL);
    path = write_named("empty", "", 0, 0);
    fixture_expect_error(trace_read(path, &t), "empty: empty file", NULL);
    path = write_named("empty.gz", "", 0, 1);
    fixture_expect_error(trace_read(path, &t), "empty.gz: empty file", NULL);
    path = write_named("blank", " \n\t\n", 4, 0);
    fixture_expect_error(trace_read(path, &t), "only blank space", NULL);
    fixture_expect_error(trace_read("/nonexistent/coop/trace", &t),
                         "/nonexistent/coop/trace: cannot open", NULL);
    /* a gzip header cut short */
    path = write_named("cut.gz", "\x1f\x8b\x08\x00\x00", 5, 0);
    fixture_expect_error(trace_read(path, &t), "cut.gz: read error: file is truncated", NULL);
    assert_null(t.events);
}

/* Files compressed with another tool than gzip are named as such, by
 * detection and by the line reader that coop sim uses without detection
 * (they were an "unknown trace format" showing the magic bytes, and to sim
 * a truncated or binary DTR log). */
static void test_other_compressors_are_named(void **state)
{
    (void)state;
    static const struct {
        const char *name, *magic, *expect;
        size_t len;
    } cases[] = {
        {"t.zst", "\x28\xb5\x2f\xfd\x04\x58", "t.zst: compressed with zstd", 6},
        {"t.bz2", "BZh91AY&SY", "t.bz2: compressed with bzip2", 10},
        {"t.xz",
         "\xfd"
         "7zXZ\x00\x00\x04",
         "t.xz: compressed with xz", 8},
        {"t.lz4", "\x04\x22\x4d\x18\x64\x40", "t.lz4: compressed with lz4", 6},
        /* the legacy lz4 frame (lz4 -l) and zstd's skippable frames
         * (0x184D2A50..5F, little-endian) were unknown formats */
        {"legacy.lz4", "\x02\x21\x4c\x18\x10\x00", "legacy.lz4: compressed with lz4", 6},
        {"skip.zst", "\x50\x2a\x4d\x18\x04\x00", "skip.zst: compressed with zstd", 6},
        {"skip5f.zst", "\x5f\x2a\x4d\x18\x04\x00", "skip5f.zst: compressed with zstd", 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trace_format f;
        trace t;
        dtr_log log;
        const char *path = write_named(cases[i].name, cases[i].magic, cases[i].len, 0);
        fixture_expect_error(trace_detect_format(path, &f), cases[i].expect,
                             "gzip only: decompress it first", NULL);
        fixture_expect_error(trace_read(path, &t), cases[i].expect, NULL);
        fixture_expect_error(dtr_log_read(path, &log), cases[i].expect, NULL);
        fixture_expect_error(trace_read_text(path, &t), cases[i].expect, NULL);
        /* inside a gzip stream too */
        path = write_named(cases[i].name, cases[i].magic, cases[i].len, 1);
        fixture_expect_error(trace_read(path, &t), cases[i].expect, NULL);
    }
}

/* A UTF-8 byte order mark (Windows editors, "CSV UTF-8" from a spreadsheet)
 * is skipped by detection and by the line readers, and line numbers still
 * count from the first line: it was an "unknown trace format" starting
 * with \xef\xbb\xbf. */
static void test_a_byte_order_mark_is_skipped(void **state)
{
    (void)state;
    static const struct {
        const char *name, *text, *bad;
        size_t events;
    } cases[] = {
        {"bom.trace",
         "\xef\xbb\xbf"
         "coop-trace 1\r\nA 1 10 0\r\nF 1\r\n",
         "\xef\xbb\xbf"
         "coop-trace 1\nA 1 x 0\n",
         2},
        {"bom.csv",
         "\xef\xbb\xbf"
         "id,lower,upper,size\r\n0,1,2,3\r\n",
         "\xef\xbb\xbf"
         "id,lower,upper,size\n0,1,x,3\n",
         2},
        {"bom.log",
         "\xef\xbb\xbf"
         "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
         "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"8\"}\n",
         "\xef\xbb\xbf"
         "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n{\"INSTRUCTION\":1}\n",
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int gzip = 0; gzip <= 1; gzip++) {
            trace t;
            const char *path =
                write_named(cases[i].name, cases[i].text, strlen(cases[i].text), gzip);
            if (trace_read(path, &t) != COOP_OK)
                fail_msg("%s refused: %s", cases[i].name, coop_last_error());
            assert_int_equal(t.num_events, cases[i].events);
            trace_free(&t);
            path = write_named(cases[i].name, cases[i].bad, strlen(cases[i].bad), gzip);
            char where[64];
            snprintf(where, sizeof where, "%s:2: ", cases[i].name);
            fixture_expect_error(trace_read(path, &t), where, NULL);
        }
    }
}

/* trace_read gives what the format's own reader gives. */
static void test_dispatch(void **state)
{
    (void)state;
    trace a, b;
    const char *path = write_named("p", tiny_pickle, sizeof tiny_pickle, 0);
    assert_int_equal(trace_read(path, &a), COOP_OK);
    assert_int_equal(trace_read_pickle(path, &b), COOP_OK);
    fixture_assert_same_trace(&a, &b);
    assert_int_equal(a.num_events, 0);
    trace_free(&a);
    trace_free(&b);

    const char *text = "coop-trace 1\nA 1 10 0\nF 1\n";
    path = write_named("t", text, strlen(text), 1);
    assert_int_equal(trace_read(path, &a), COOP_OK);
    assert_int_equal(trace_read_text(path, &b), COOP_OK);
    fixture_assert_same_trace(&a, &b);
    assert_int_equal(a.num_events, 2);
    trace_free(&a);
    trace_free(&b);

    const char *csv = "id,lower,upper,size\n0,1,2,3\n";
    path = write_named("c", csv, strlen(csv), 0);
    assert_int_equal(trace_read(path, &a), COOP_OK);
    assert_int_equal(trace_read_minimalloc(path, &b), COOP_OK);
    fixture_assert_same_trace(&a, &b);
    assert_int_equal(a.num_events, 2);
    trace_free(&a);
    trace_free(&b);

    /* the wrong reader on a file is an error, not a misreading */
    fixture_expect_error(trace_read_text(path, &a), ":1: expected the header 'coop-trace 1'", NULL);
    fixture_expect_error(trace_read_pickle(path, &a), "byte 0: not a pickle", NULL);
    path = write_named("p", tiny_pickle, sizeof tiny_pickle, 0);
    fixture_expect_error(trace_read_minimalloc(path, &a), "p:1:", NULL);
    trace_free(&a); /* safe on the zeroed trace a failed reader leaves */
}

/* A gzip bomb (inflating past TRACE_INPUT_BOMB_RATIO once past
 * TRACE_INPUT_BOMB_MIN bytes) is refused by the line reader and by the
 * whole-file reader the pickle reader uses, naming the file; the same bytes
 * uncompressed are not limited. */
static void test_gzip_bombs_are_refused(void **state)
{
    (void)state;
    size_t len = TRACE_INPUT_BOMB_MIN + (8u << 20);
    char *text = malloc(len);
    assert_non_null(text);
    for (size_t i = 0; i < len; i += 2) {
        text[i] = '#'; /* comment lines: a text trace that holds nothing */
        text[i + 1] = '\n';
    }
    const char *bomb = write_named("bomb.trace.gz", text, len, 1);
    trace t;
    assert_int_equal(trace_read_text(bomb, &t), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "refused as a gzip bomb"));
    assert_non_null(strstr(coop_last_error(), "bomb.trace.gz:"));
    unsigned char *data = NULL;
    size_t n = 0;
    assert_int_equal(trace_input_slurp(bomb, &data, &n), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "refused as a gzip bomb"));
    assert_null(data);
    const char *plain = write_named("plain.trace", text, len, 0);
    assert_int_equal(trace_input_slurp(plain, &data, &n), COOP_OK);
    assert_int_equal(n, len);
    free(data);
    free(text);
}

/* The ratio is the bound, not a margin below a real bomb's: comment lines
 * with 8 random hex digits every 3,000 bytes deflate about 270 to 1, over
 * TRACE_INPUT_BOMB_RATIO (200) though far under "#\n" repeated (1,000+). */
static void test_gzip_ratio_just_over_the_bound_is_refused(void **state)
{
    (void)state;
    size_t len = TRACE_INPUT_BOMB_MIN + (8u << 20), period = 3000;
    char *text = malloc(len);
    assert_non_null(text);
    uint64_t rng = test_seed("trace_read_test", 7); /* any seed deflates alike */
    for (size_t i = 0; i < len; i += 2) {
        text[i] = '#';
        text[i + 1] = '\n';
    }
    for (size_t i = 0; i + period <= len; i += period)
        snprintf(text + i, 11, "#%08llx", (unsigned long long)(test_splitmix64(&rng) >> 32));
    for (size_t i = 0; i + period <= len; i += period)
        text[i + 9] = '\n'; /* snprintf's NUL */
    const char *path = write_named("ratio.trace.gz", text, len, 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    double ratio = (double)len / (double)st.st_size;
    if (ratio <= TRACE_INPUT_BOMB_RATIO || ratio >= 2 * TRACE_INPUT_BOMB_RATIO) {
        fail_msg("the input deflates %.0f to 1, not between %d and %d", ratio,
                 TRACE_INPUT_BOMB_RATIO, 2 * TRACE_INPUT_BOMB_RATIO);
        return;
    }
    trace t;
    fixture_expect_error(trace_read_text(path, &t), "refused as a gzip bomb", NULL);
    free(text);
}

/* A writer on the other end of a FIFO, as a shell's `<(...)` or `|` is. */
typedef struct pipe_writer {
    pthread_t thread;
    const char *path;
    const void *data;
    size_t len;
    size_t written; /* bytes the reader took */
} pipe_writer;

static void *write_pipe(void *arg)
{
    pipe_writer *w = arg;
    int fd = open(w->path, O_WRONLY); /* waits for the reader */
    if (fd < 0)
        return NULL;
    const char *p = w->data;
    while (w->written < w->len) {
        ssize_t n = write(fd, p + w->written, w->len - w->written);
        if (n <= 0)
            break; /* EPIPE: the reader closed it (SIGPIPE is ignored) */
        w->written += (size_t)n;
    }
    close(fd);
    return NULL;
}

/* Code that opens a pipe a second time waits in open() for a writer that
 * is gone: the watchdog ends the test (failed) instead of letting it hang. */
static void pipe_watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "trace_read_test: a pipe test did not finish in 60 s: code under "
                              "test waits on a pipe (opened twice?)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0)
        _exit(2);
    _exit(1);
}

static const char *make_fifo(const char *name)
{
    signal(SIGALRM, pipe_watchdog_fired);
    alarm(60); /* reset by each FIFO made: one test's worth */
    static char path[300];
    fixture_path(path, sizeof path, name);
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    return path;
}

static void start_writer(pipe_writer *w, const char *path, const void *data, size_t len)
{
    *w = (pipe_writer){.path = path, .data = data, .len = len};
    assert_int_equal(pthread_create(&w->thread, NULL, write_pipe, w), 0);
}

/* Joins the writer. Code that never opens the pipe would leave it waiting
 * in open() for ever: after 30 s the pipe is opened here to release it,
 * and the test fails instead of hanging. */
static void finish_writer(pipe_writer *w)
{
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 30;
    if (pthread_timedjoin_np(w->thread, NULL, &limit) == 0)
        return;
    int fd = open(w->path, O_RDONLY | O_NONBLOCK);
    assert_int_equal(pthread_join(w->thread, NULL), 0);
    if (fd >= 0)
        close(fd);
    fail_msg("%s: the pipe was not opened by the code under test in 30 s", w->path);
}

static unsigned char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *data = malloc(1 << 20);
    assert_non_null(data);
    *len = fread(data, 1, 1 << 20, f);
    fclose(f);
    return data;
}

/* trace_spool_open's descriptor on path's kept copy, -1 when none is kept
 * (an error fails the test). */
static int kept_fd(const char *path)
{
    int fd;
    if (trace_spool_open(path, &fd) != COOP_OK)
        fail_msg("%s", coop_last_error());
    return fd;
}

/* A trace given as a pipe: format detection reads it once, whole, into a
 * kept copy that the reader opens under the pipe's name (spool.h). Before,
 * the reader got only what detection's peek left. */
static void test_a_pipe_is_read_whole_once(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "coop-trace 1\nA 1 10 0\nA 2 4096 0\nF 1\nF 2\n",
        "id,lower,upper,size\n0,1,2,3\n1,0,4,512\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int gzip = 0; gzip <= 1; gzip++) {
            char name[32];
            snprintf(name, sizeof name, "file%zu%s", i, gzip ? ".gz" : "");
            char file[300];
            snprintf(file, sizeof file, "%s", write_named(name, texts[i], strlen(texts[i]), gzip));
            size_t len;
            unsigned char *bytes = file_bytes(file, &len);
            const char *fifo = make_fifo("trace.fifo");
            pipe_writer w;
            start_writer(&w, fifo, bytes, len);
            trace a, b;
            assert_int_equal(trace_read(fifo, &a), COOP_OK);
            finish_writer(&w);
            assert_int_equal(w.written, len);
            assert_int_equal(trace_read(file, &b), COOP_OK);
            assert_true(a.num_events > 0);
            fixture_assert_same_trace(&a, &b);
            /* read whole: the copy is dropped */
            assert_int_equal(kept_fd(fifo), -1);
            trace_free(&a);
            trace_free(&b);
            free(bytes);
        }
    /* bad content in a pipe is named by the pipe and its line */
    const char *bad = "coop-trace 1\nA 1 10 0\nX what\n";
    const char *fifo = make_fifo("bad.fifo");
    pipe_writer w;
    start_writer(&w, fifo, bad, strlen(bad));
    trace t;
    fixture_expect_error(trace_read(fifo, &t), "bad.fifo:3: ", NULL);
    finish_writer(&w);
    assert_null(t.events);
    assert_int_equal(kept_fd(fifo), -1);
}

/* Each open of a kept copy starts at its first byte and has an offset of
 * its own; the copy outlives its drop while a descriptor is open; files
 * and missing paths are never copied. */
static void test_a_kept_pipe_opens_from_the_start(void **state)
{
    (void)state;
    const char *fifo = make_fifo("keep.fifo");
    pipe_writer w;
    start_writer(&w, fifo, "hello world", 11);
    assert_int_equal(trace_spool_keep(fifo), COOP_OK);
    finish_writer(&w);
    /* kept: not read again, and kept until each keep is dropped */
    assert_int_equal(trace_spool_keep(fifo), COOP_OK);
    trace_spool_drop(fifo);
    int one = kept_fd(fifo), two = kept_fd(fifo);
    assert_true(one >= 0 && two >= 0);
    /* not inherited by a program the caller runs (rev30-D) */
    assert_true(fcntl(one, F_GETFD) & FD_CLOEXEC);
    char buf[16] = "";
    assert_int_equal(read(one, buf, 5), 5);
    assert_memory_equal(buf, "hello", 5);
    memset(buf, 0, sizeof buf);
    assert_int_equal(read(two, buf, sizeof buf), 11);
    assert_string_equal(buf, "hello world");
    trace_spool_drop(fifo);
    assert_int_equal(kept_fd(fifo), -1);
    memset(buf, 0, sizeof buf);
    assert_int_equal(read(one, buf, sizeof buf), 6);
    assert_string_equal(buf, " world");
    close(one);
    close(two);
    trace_spool_drop(fifo); /* twice: nothing */

    const char *file = write_named("plain", "coop-trace 1\n", 13, 0);
    assert_int_equal(trace_spool_keep(file), COOP_OK);
    assert_int_equal(kept_fd(file), -1);
    /* nor devices: /dev/null, or a terminal, is opened by name (rev30-D) */
    assert_int_equal(trace_spool_keep("/dev/null"), COOP_OK);
    assert_int_equal(kept_fd("/dev/null"), -1);
    assert_int_equal(trace_spool_keep("/nonexistent/coop/pipe"), COOP_OK);
    assert_int_equal(kept_fd("/nonexistent/coop/pipe"), -1);
}

/* No room for the copy: the pipe is named with the directory, nothing is
 * kept, and the writer is not left waiting for a reader. */
static void test_a_pipe_without_room_for_its_copy(void **state)
{
    (void)state;
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    char none[300];
    fixture_path(none, sizeof none, "no-such-dir");
    setenv("TMPDIR", none, 1);
    const char *fifo = make_fifo("full.fifo");
    pipe_writer w;
    start_writer(&w, fifo, "coop-trace 1\n", 13);
    trace t;
    fixture_expect_error(trace_read(fifo, &t), "full.fifo: cannot keep a copy of the pipe in ",
                         "no-such-dir: No such file or directory; set TMPDIR to a writable "
                         "directory with room, or give the trace as a file",
                         NULL);
    finish_writer(&w);
    assert_int_equal(kept_fd(fifo), -1);
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
}

/* Writes all of a buffer to a socket and shuts its sending side: a
 * service's or a harness's standard input. */
typedef struct socket_writer {
    int fd;
    const unsigned char *data;
    size_t len;
} socket_writer;

static void *write_socket(void *arg)
{
    socket_writer *w = arg;
    size_t done = 0;
    while (done < w->len) {
        ssize_t n = write(w->fd, w->data + done, w->len - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    shutdown(w->fd, SHUT_WR);
    return NULL;
}

/* '-' is /dev/stdin; on a socket (systemd, a test harness) it cannot be
 * opened again by name (ENXIO: "cannot open: No such device or address"
 * before rev30-D), so it is copied from descriptor 0 itself. */
static void test_stdin_a_socket_is_read(void **state)
{
    (void)state;
    alarm(60); /* the pipe tests' watchdog */
    const char *text = "coop-trace 1\nA 1 10 0\nA 2 4096 0\nF 1\nF 2\n";
    const char *file = write_named("socket.trace.gz", text, strlen(text), 1);
    size_t len;
    unsigned char *bytes = file_bytes(file, &len);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(sv[1], STDIN_FILENO), STDIN_FILENO);
    close(sv[1]);
    socket_writer w = {sv[0], bytes, len};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, write_socket, &w), 0);
    trace a, b;
    coop_status st = trace_read("/dev/stdin", &a);
    const char *why = st == COOP_OK ? "" : coop_last_error();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", why);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
    close(sv[0]);
    if (st != COOP_OK)
        fail_msg("a socket on stdin: %s", msg);
    assert_int_equal(trace_read(file, &b), COOP_OK);
    assert_true(a.num_events > 0);
    fixture_assert_same_trace(&a, &b);
    assert_int_equal(kept_fd("/dev/stdin"), -1);
    trace_free(&a);
    trace_free(&b);
    free(bytes);
}

/* With standard input closed (`coop replay F <&-`), descriptor 0 is the
 * first one free, and the copy's may be it: a kept copy on 0 is still the
 * copy, not a cue to open the pipe by name again (which would wait for a
 * writer that is gone). */
static void test_a_kept_copy_on_descriptor_0(void **state)
{
    (void)state;
    int saved = dup(STDIN_FILENO);
    assert_true(saved >= 0);
    close(STDIN_FILENO);
    const char *text = "coop-trace 1\nA 1 10 0\nF 1\n";
    const char *fifo = make_fifo("fd0.fifo");
    pipe_writer w;
    start_writer(&w, fifo, text, strlen(text));
    trace t;
    coop_status st = trace_read(fifo, &t);
    finish_writer(&w);
    assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
    close(saved);
    assert_int_equal(st, COOP_OK);
    assert_int_equal(t.num_events, 2);
    trace_free(&t);
}

/* Reads `len` bytes of data through a fresh FIFO under TMPDIR=tmpdir (NULL:
 * unset) while files may grow to fsize bytes at most; returns the status. */
static coop_status read_through_fifo(const void *data, size_t len, const char *tmpdir, rlim_t fsize)
{
    const char *fifo = make_fifo("leak.fifo");
    if (tmpdir)
        setenv("TMPDIR", tmpdir, 1);
    else
        unsetenv("TMPDIR");
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = fsize;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    pipe_writer w;
    start_writer(&w, fifo, data, len);
    trace t;
    coop_status st = trace_read(fifo, &t);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    finish_writer(&w);
    if (st == COOP_OK)
        trace_free(&t);
    assert_int_equal(kept_fd(fifo), -1); /* nothing kept */
    return st;
}

/* Every way through a pipe (read whole, bad content, no directory for the
 * copy, the copy failing as on a full disk: RLIMIT_FSIZE stands for one)
 * leaves no descriptor open, and a failed copy names the directory it was
 * in: $TMPDIR, else /tmp when TMPDIR is unset or empty (rev30-D). */
static void test_pipe_reads_leave_no_descriptor(void **state)
{
    (void)state;
    signal(SIGXFSZ, SIG_IGN); /* the copy's write fails with EFBIG instead */
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    char dir[300], none[300];
    fixture_path(dir, sizeof dir, "");
    fixture_path(none, sizeof none, "no-such-dir");
    char *big = malloc(200000);
    assert_non_null(big);
    size_t n = (size_t)snprintf(big, 200000, "coop-trace 1\n");
    for (int id = 1; n + 64 < 200000; id++)
        n += (size_t)snprintf(big + n, 200000 - n, "A %d 4096 0\nF %d\n", id, id);
    const char *bad = "coop-trace 1\nA 1 10 0\nX what\n";
    int before = open_descriptors();
    for (int round = 0; round < 3; round++) {
        assert_int_equal(read_through_fifo(big, n, dir, RLIM_INFINITY), COOP_OK);
        fixture_expect_error(read_through_fifo(bad, strlen(bad), dir, RLIM_INFINITY),
                             "leak.fifo:3: ", NULL);
        /* detection's own failure drops the copy it kept */
        fixture_expect_error(read_through_fifo("", 0, dir, RLIM_INFINITY), "leak.fifo: empty file",
                             NULL);
        fixture_expect_error(read_through_fifo(big, n, none, RLIM_INFINITY),
                             "leak.fifo: cannot keep a copy of the pipe in ", "no-such-dir", NULL);
        fixture_expect_error(read_through_fifo(big, n, dir, 1000),
                             "leak.fifo: cannot keep a copy of the pipe in ", dir,
                             ": File too large; set TMPDIR to a writable directory with room, or "
                             "give the trace as a file",
                             NULL);
        fixture_expect_error(read_through_fifo(big, n, "", 1000),
                             "cannot keep a copy of the pipe in /tmp: File too large", NULL);
        fixture_expect_error(read_through_fifo(big, n, NULL, 1000),
                             "cannot keep a copy of the pipe in /tmp: File too large", NULL);
    }
    assert_int_equal(open_descriptors(), before);
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
    free(big);
    signal(SIGXFSZ, SIG_DFL);
}

/* TMPDIR set to a directory of the test's own, made empty; returns the old
 * value for tmpdir_restore. */
static char *tmpdir_set(char *dir, size_t cap, const char *name)
{
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    fixture_path(dir, cap, name);
    mkdir(dir, 0700);
    setenv("TMPDIR", dir, 1);
    return saved;
}

static void tmpdir_restore(char *saved)
{
    if (saved)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
}

/* Entries in dir other than . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* All of fd from its current offset (at most cap bytes); the count. */
static size_t read_rest(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (ssize_t got; n < cap && (got = read(fd, buf + n, cap - n)) > 0;)
        n += (size_t)got;
    return n;
}

/* The limit on a pipe's copy (TRACE_SPOOL_MAX, 4 GiB, lowered here to 1000
 * bytes through trace_spool_limit): exactly the limit is kept, one byte
 * more is refused naming the pipe, the limit and the directory, nothing is
 * kept or left in the directory, and the writer is released (EPIPE) rather
 * than left waiting. */
static void test_a_pipe_over_the_limit(void **state)
{
    (void)state;
    char dir[300];
    char *saved = tmpdir_set(dir, sizeof dir, "limit-tmp");
    enum { LIMIT = 1000, BIG = 300000 };
    char *data = malloc(BIG);
    assert_non_null(data);
    memset(data, 'x', BIG);
    trace_spool_limit = LIMIT;
    const char *fifo = make_fifo("limit.fifo");
    pipe_writer w;
    start_writer(&w, fifo, data, LIMIT);
    assert_int_equal(trace_spool_keep(fifo), COOP_OK);
    finish_writer(&w);
    int fd = kept_fd(fifo);
    assert_true(fd >= 0);
    char buf[2 * LIMIT];
    assert_int_equal(read_rest(fd, buf, sizeof buf), LIMIT);
    close(fd);
    trace_spool_drop(fifo);
    assert_int_equal(kept_fd(fifo), -1);
    for (size_t len = LIMIT + 1; len <= BIG; len = BIG) {
        start_writer(&w, fifo, data, len);
        fixture_expect_error(trace_spool_keep(fifo),
                             "limit.fifo: a pipe of more than 1000 bytes: its copy in ", dir,
                             " would be too large; write it to a file first", NULL);
        finish_writer(&w);
        assert_int_equal(kept_fd(fifo), -1);
        assert_int_equal(dir_entries(dir), 0);
        if (len == BIG) {
            assert_true(w.written < len); /* the pipe was closed on it */
            break;
        }
    }
    trace_spool_limit = TRACE_SPOOL_MAX;
    tmpdir_restore(saved);
    free(data);
}

/* Where /proc is not mounted a kept copy is reached through a duplicate,
 * whose offset is shared: two readers open at once must still each read
 * the whole copy from its first byte, and nothing is left in TMPDIR. */
static void test_a_kept_pipe_without_proc(void **state)
{
    (void)state;
    char dir[300];
    char *saved = tmpdir_set(dir, sizeof dir, "noproc-tmp");
    char none[300];
    trace_spool_fd_dir = fixture_path(none, sizeof none, "no-proc");
    const char *fifo = make_fifo("noproc.fifo");
    pipe_writer w;
    start_writer(&w, fifo, "hello world", 11);
    assert_int_equal(trace_spool_keep(fifo), COOP_OK);
    finish_writer(&w);
    int one = kept_fd(fifo);
    assert_true(one >= 0);
    char buf[16] = "";
    assert_int_equal(read(one, buf, 5), 5);
    assert_memory_equal(buf, "hello", 5);
    int two = kept_fd(fifo);
    assert_true(two >= 0);
    assert_true(fcntl(two, F_GETFD) & FD_CLOEXEC);
    memset(buf, 0, sizeof buf);
    assert_int_equal(read_rest(two, buf, sizeof buf), 11);
    assert_string_equal(buf, "hello world");
    memset(buf, 0, sizeof buf);
    assert_int_equal(read_rest(one, buf, sizeof buf), 6);
    assert_string_equal(buf, " world");
    close(one);
    close(two);
    trace_spool_drop(fifo);
    assert_int_equal(kept_fd(fifo), -1);
    assert_int_equal(dir_entries(dir), 0);
    /* and a trace read through a pipe, detection then the reader */
    const char *text = "coop-trace 1\nA 1 10 0\nA 2 4096 0\nF 1\nF 2\n";
    start_writer(&w, fifo, text, strlen(text));
    trace t;
    assert_int_equal(trace_read(fifo, &t), COOP_OK);
    finish_writer(&w);
    assert_int_equal(t.num_events, 4);
    trace_free(&t);
    assert_int_equal(dir_entries(dir), 0);
    trace_spool_fd_dir = "/proc/self/fd";
    tmpdir_restore(saved);
}

/* Without /proc, a kept copy whose copy cannot be made (its directory gone
 * here; a full disk in use): the read fails naming the pipe, the directory
 * and the way out. It must not open the pipe by name again: its writer is
 * gone, so that would wait for ever, or, as here where a second writer
 * holds it, read a stream that is not the trace. */
static void test_a_kept_pipe_not_reopened(void **state)
{
    (void)state;
    char dir[300];
    char *saved = tmpdir_set(dir, sizeof dir, "reopen-tmp");
    char none[300];
    trace_spool_fd_dir = fixture_path(none, sizeof none, "no-proc");
    const char *fifo = make_fifo("reopen.fifo");
    const char *text = "coop-trace 1\nA 1 10 0\nF 1\n", *other = "coop-trace 1\n";
    pipe_writer w;
    start_writer(&w, fifo, text, strlen(text));
    assert_int_equal(trace_spool_keep(fifo), COOP_OK);
    finish_writer(&w);
    assert_int_equal(rmdir(dir), 0); /* the copy is unlinked: the directory is empty */
    start_writer(&w, fifo, other, strlen(other));
    trace t;
    fixture_expect_error(trace_read_as(fifo, TRACE_FORMAT_TEXT, &t),
                         "reopen.fifo: ", "reopen-tmp (",
                         "No such file or directory; set TMPDIR to a writable", NULL);
    assert_null(t.events);
    /* the second writer, never read, is released */
    int release = open(fifo, O_RDONLY | O_NONBLOCK);
    finish_writer(&w);
    if (release >= 0)
        close(release);
    assert_int_equal(mkdir(dir, 0700), 0); /* back: the copy reads whole again */
    assert_int_equal(trace_read_as(fifo, TRACE_FORMAT_TEXT, &t), COOP_OK);
    assert_int_equal(t.num_events, 2);
    trace_free(&t);
    trace_spool_drop(fifo);
    assert_int_equal(dir_entries(dir), 0);
    trace_spool_fd_dir = "/proc/self/fd";
    tmpdir_restore(saved);
}

/* One keeper of a shared pipe: keeps it, reads its copy whole, drops it. */
typedef struct pipe_keeper {
    pthread_t thread;
    const char *path;
    coop_status status;
    char got[64];
    size_t len;
} pipe_keeper;

static void *keep_and_read(void *arg)
{
    pipe_keeper *k = arg;
    k->status = trace_spool_keep(k->path);
    if (k->status != COOP_OK)
        return NULL;
    int fd;
    if (trace_spool_open(k->path, &fd) == COOP_OK && fd >= 0) {
        k->len = read_rest(fd, k->got, sizeof k->got);
        close(fd);
    }
    trace_spool_drop(k->path);
    return NULL;
}

static sem_t second_keeper_waits;

static void on_keeper_wait(const char *path)
{
    (void)path;
    sem_post(&second_keeper_waits);
}

/* Two threads keep one pipe at once: the first copies it, the second waits
 * for that copy (trace_spool_wait_hook tells the test it waits) and reads
 * the same bytes, not a share of the pipe nor an empty one; the copy lasts
 * until both dropped it. The writer holds back its second half until the
 * second keeper waits (without the wait both read the pipe, and the
 * watchdog fails the test). */
static void test_two_threads_keep_one_pipe(void **state)
{
    (void)state;
    static const char first[] = "coop-trace 1\nA 1 10 0\n", rest[] = "A 2 4096 0\nF 1\nF 2\n";
    const char *fifo = make_fifo("shared.fifo");
    assert_int_equal(sem_init(&second_keeper_waits, 0, 0), 0);
    trace_spool_wait_hook = on_keeper_wait;
    int wfd = -1;
    pipe_keeper a = {.path = fifo}, b = {.path = fifo};
    assert_int_equal(pthread_create(&a.thread, NULL, keep_and_read, &a), 0);
    wfd = open(fifo, O_WRONLY); /* the first keeper opened it */
    assert_true(wfd >= 0);
    assert_int_equal(write(wfd, first, strlen(first)), (ssize_t)strlen(first));
    assert_int_equal(pthread_create(&b.thread, NULL, keep_and_read, &b), 0);
    /* Untimed: the second keeper always finds the copy under way (its
     * writer, here, holds back), however late a loaded machine starts it;
     * code that never waits is failed by the pipe tests' 60 s watchdog. */
    while (sem_wait(&second_keeper_waits) != 0)
        assert_int_equal(errno, EINTR);
    assert_int_equal(write(wfd, rest, strlen(rest)), (ssize_t)strlen(rest));
    close(wfd);
    assert_int_equal(pthread_join(a.thread, NULL), 0);
    assert_int_equal(pthread_join(b.thread, NULL), 0);
    trace_spool_wait_hook = NULL;
    sem_destroy(&second_keeper_waits);
    assert_int_equal(a.status, COOP_OK);
    assert_int_equal(b.status, COOP_OK);
    size_t whole = strlen(first) + strlen(rest);
    assert_int_equal(a.len, whole);
    assert_int_equal(b.len, whole);
    assert_memory_equal(a.got, b.got, whole);
    assert_int_equal(kept_fd(fifo), -1); /* both dropped it */
}

int main(void)
{
    fixture_init();
    signal(SIGPIPE, SIG_IGN); /* the pipe writers see EPIPE, not a signal */
    /* CI's ThreadSanitizer run takes only the pipe tests (COOP_TEST_FILTER
     * '*pipe*'): they start the threads, the spool's shared copies among
     * them; the others, gzip bombs and format detection, are one thread
     * and took most of the 16-20 s the whole program takes under TSan */
    const char *filter = getenv("COOP_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_detect_errors),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_other_compressors_are_named),
        cmocka_unit_test(test_a_byte_order_mark_is_skipped),
        cmocka_unit_test(test_gzip_bombs_are_refused),
        cmocka_unit_test(test_gzip_ratio_just_over_the_bound_is_refused),
        cmocka_unit_test(test_a_pipe_is_read_whole_once),
        cmocka_unit_test(test_a_kept_pipe_opens_from_the_start),
        cmocka_unit_test(test_a_pipe_without_room_for_its_copy),
        cmocka_unit_test(test_stdin_a_socket_is_read),
        cmocka_unit_test(test_pipe_reads_leave_no_descriptor),
        cmocka_unit_test(test_a_kept_copy_on_descriptor_0),
        cmocka_unit_test(test_a_pipe_over_the_limit),
        cmocka_unit_test(test_a_kept_pipe_without_proc),
        cmocka_unit_test(test_a_kept_pipe_not_reopened),
        cmocka_unit_test(test_two_threads_keep_one_pipe),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    alarm(0); /* the pipe tests' watchdog */
    fixture_cleanup();
    return failed;
}
