/*
 * The coop text trace reader and writer: the README's example, id reuse,
 * every kind of bad line (with its line number), truncation at every byte,
 * number parsing, and write/read round trips (plain, gzip).
 */
#include "trace_fixture.h"

#include "trace/input.h"
#include "trace/text_number.h"
#include "utf8.h"

static coop_status read_text(const char *text, int gzip, trace *t)
{
    char path[300];
    fixture_path(path, sizeof path, gzip ? "t.trace.gz" : "t.trace");
    fixture_write(path, text, strlen(text), gzip);
    return trace_read_text(path, t);
}

static void test_readme_example(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(trace_read_text(COOP_TEST_SRCDIR "/tests/data/example.trace", &t), COOP_OK);
    fixture_check_invariants(&t);
    assert_string_equal(t.name, "example.trace");
    assert_int_equal(t.num_events, 6);
    assert_int_equal(t.num_ids, 2);
    assert_int_equal(t.num_live_at_start, 1);
    assert_int_equal(t.live_at_start[0], 0); /* file id 7 is the first seen: dense 0 */
    assert_int_equal(t.events[0].kind, TRACE_ALLOC);
    assert_int_equal(t.events[0].size, 1024);
    assert_int_equal(t.events[0].addr, 0x7f0000000000);
    assert_int_equal(t.events[0].time_us, -1);
    assert_int_equal(t.events[1].kind, TRACE_SEGMENT_ALLOC);
    assert_int_equal(t.events[1].size, 2097152);
    assert_int_equal(t.events[1].time_us, 100);
    assert_int_equal(t.events[2].kind, TRACE_ALLOC);
    assert_int_equal(t.events[2].id, 1); /* file id 0 */
    assert_int_equal(t.events[3].kind, TRACE_FREE_REQUESTED);
    assert_int_equal(t.events[3].id, 0);
    assert_int_equal(t.events[3].size, 1024); /* frees repeat the alloc */
    assert_int_equal(t.events[4].kind, TRACE_FREE);
    assert_int_equal(t.events[4].time_us, 105);
    assert_int_equal(t.events[5].id, 1);
    assert_true(t.has_segment_events);
    assert_int_equal(t.num_final_segments, 1);
    trace_free(&t);
}

static void test_all_lines(void **state)
{
    (void)state;
    const char *text = "\n"
                       "# leading comment\n"
                       "  coop-trace\t1   # trailing comment\n"
                       "A 5 100 3 cost=77\r\n"
                       "F 5\n"
                       "A 5 200 0x10 t=-3\n" /* id 5 reused after its F */
                       "M 0x1000 4096\n"
                       "N 4096 4096 2 t=9\n"
                       "U 0 2097152\n"
                       "O 18446744073709551615 1\n"
                       "\t\n";
    for (int gzip = 0; gzip <= 1; gzip++) {
        trace t;
        assert_int_equal(read_text(text, gzip, &t), COOP_OK);
        fixture_check_invariants(&t);
        assert_int_equal(t.num_events, 7);
        assert_int_equal(t.num_ids, 2);
        assert_int_equal(t.events[0].cost_ns, 77);
        assert_int_equal(t.events[0].stream, 3);
        assert_int_equal(t.events[2].id, 1);
        assert_int_equal(t.events[2].size, 200);
        assert_int_equal(t.events[2].stream, 16);
        assert_int_equal(t.events[2].time_us, -3);
        assert_int_equal(t.events[3].kind, TRACE_SEGMENT_MAP);
        assert_int_equal(t.events[3].stream, 0);
        assert_int_equal(t.events[4].kind, TRACE_SEGMENT_UNMAP);
        assert_int_equal(t.events[4].addr, 4096);
        assert_int_equal(t.events[5].kind, TRACE_SEGMENT_FREE);
        assert_int_equal(t.events[6].kind, TRACE_OOM);
        assert_true(t.events[6].size == UINT64_MAX);
        assert_int_equal(t.events[6].stream, 1);
        assert_true(t.has_segment_events);
        /* the lines of M, N, U, for messages about segment events */
        assert_int_equal(t.num_segment_where, 3);
        assert_false(t.segment_where_is_byte);
        assert_int_equal(t.segment_where[0], 7);
        assert_int_equal(t.segment_where[1], 8);
        assert_int_equal(t.segment_where[2], 9);
        trace_free(&t);
    }
    /* only a header: a valid, empty trace */
    trace t;
    assert_int_equal(read_text("coop-trace 1\n", 0, &t), COOP_OK);
    assert_int_equal(t.num_events, 0);
    assert_false(t.has_segment_events);
    trace_free(&t);
}

typedef struct bad_text {
    const char *text;
    const char *expect1, *expect2;
} bad_text;

static void test_bad_lines(void **state)
{
    (void)state;
    static const bad_text cases[] = {
        {"", ":1: no 'coop-trace 1' header", "empty"},
        {"# only a comment\n", ":2: no 'coop-trace 1' header", ""},
        {"A 1 2 3\n", ":1: expected the header 'coop-trace 1' before 'A'", ""},
        {"coop-trace 2\n", ":1: unsupported header", ""},
        {"coop-trace\n", ":1: unsupported header", ""},
        {"coop-trace 1 extra\n", ":1: unsupported header", ""},
        {"coop-trace 1\nX 1\n", ":2: unknown line 'X'", ""},
        {"coop-trace 1\nAA 1 2 3\n", ":2: unknown line 'AA'", ""},
        {"coop-trace 1\nP\n", ":2: expected 'P torch [SETTING ...]'", ""},
        {"coop-trace 1\nP jax\n", ":2: expected 'P torch [SETTING ...]'", ""},
        {"coop-trace 1\nP torch fast_mode\n", ":2: unknown PyTorch setting 'fast_mode'",
         "known: expandable_segments"},
        {"coop-trace 1\nP torch\nP torch\n", ":3: a second P line", ""},
        {"coop-trace 1\nP coop\nP torch\n", ":3: a second P line", ""},
        {"coop-trace 1\nP coop expandable_segments\n", ":2: expected 'P torch [SETTING ...]'",
         "or 'P coop'"},
        {"coop-trace 1\nA 1 2\n", ":2: missing fields on a A line", "usage: A id size stream"},
        {"coop-trace 1\nA 1 2 3 4\n", ":2: too many fields on a A line", ""},
        {"coop-trace 1\nA 1 two 3\n", ":2: size 'two' is not a number", ""},
        {"coop-trace 1\nF x\n", ":2: id 'x' is not a number", ""},
        {"coop-trace 1\nA 1 -2 3\n", ":2: size '-2' is negative", ""},
        /* zero with a minus sign is not negative: it has a sign an unsigned field does not take */
        {"coop-trace 1\nA 1 -0 3\n", ":2: size '-0' is not an unsigned number (no sign allowed)",
         ""},
        /* control characters in a quoted field are shown escaped: a CR left
         * by CR CR LF line ends showed "stream '0' is not a number" */
        {"coop-trace 1\r\nA 1 2 0\r\r\n", ":2: stream '0\\x0d' is not a number", ""},
        {"coop-trace 1\nA 1 \x1b[2J 0\n", ":2: size '\\x1b[2J' is not a number", ""},
        {"coop-trace 1\nA 1 18446744073709551616 3\n",
         ":2: size '18446744073709551616' is out of range", ""},
        {"coop-trace 1\nA 1 0x1ffffffffffffffff 3\n", ":2: size", "out of range"},
        /* sizes are below 2^56, so that rounding and sums never wrap */
        {"coop-trace 1\nA 1 72057594037927936 3\n",
         ":2: size 72057594037927936 is too large (sizes must be below 2^56)", ""},
        {"coop-trace 1\nL 1 18446744073709551615 3\n", ":2: size 18446744073709551615 is too large",
         ""},
        {"coop-trace 1\nS 0x1000 0x100000000000000\n", ":2: size 72057594037927936 is too large",
         ""},
        {"coop-trace 1\nE 0x1000 18446744073709551615 0\n", ":2: size 18446744073709551615 is too",
         ""},
        {"coop-trace 1\nA 1 2 3 foo=1\n", ":2: unknown key 'foo' on a A line", ""},
        {"coop-trace 1\nA 1 2 3 t=1 t=2\n", ":2: key 't' given twice", ""},
        {"coop-trace 1\nA 1 2 3 t=x\n", ":2: t 'x' is not a number", ""},
        {"coop-trace 1\nA 1 2 3 t=9223372036854775808\n",
         ":2: t '9223372036854775808' is out of range", ""},
        {"coop-trace 1\nA 1 2 3 addr=\n", ":2: addr '(empty)' is not a number", ""},
        {"coop-trace 1\nA 1 2 3 t=1 junk\n", ":2: unexpected 'junk'", ""},
        {"coop-trace 1\nR 1 addr=5\n", ":2: unknown key 'addr' on a R line", ""},
        {"coop-trace 1\nA 1 2 3\nA 1 2 3\n", ":3: id 1 is already live (allocated at line 2", ""},
        {"coop-trace 1\nF 4\n", ":2: F of id 4, which is not live", ""},
        {"coop-trace 1\nA 1 2 3\nF 1\nR 1\n", ":4: R of id 1, which is not live", ""},
        {"coop-trace 1\nA 1 2 3\nR 1\nR 1\n", ":4: second R of id 1", ""},
        {"coop-trace 1\nA 1 2 3\nL 2 2 3\n", ":3: L lines must come before every other event", ""},
        {"coop-trace 1\nS 1\n", ":2: missing fields on a S line", ""},
        {"coop-trace 1\nO\n", ":2: missing fields on a O line", ""},
        {"coop-trace 1\nE 1 2 3 4\n", ":2: too many fields on a E line", ""},
        /* final segments are reservations of the device's memory, as the
         * snapshot reader holds them: none past 2^64, no two sharing a byte
         * (replay's recorded figure adds their sizes; both were read) */
        {"coop-trace 1\nE 0xfffffffffffff000 8192\n",
         ":2: E segment 0xfffffffffffff000 (8192 bytes) runs past the end of the 64-bit address "
         "space",
         ""},
        {"coop-trace 1\nE 0x2000 8192\nA 1 2 3\nE 0x1000 8192 1\n",
         ":2: E segment [0x2000, 0x4000) overlaps [0x1000, 0x3000), line 4: two reservations of "
         "the device's memory never share a byte",
         ""},
        /* each against the one before it in address order, not the first */
        {"coop-trace 1\nE 0x1000 4096\nE 0x3000 8192\nE 0x4000 4096\n",
         ":4: E segment [0x4000, 0x5000) overlaps [0x3000, 0x5000), line 3", ""},
        {"coop-trace 1\nE 1 2 t=4\n", ":2: unknown key 't' on a E line", ""},
        {"coop-trace 1\nA 1 2 3 4 5 6 7 8 9 10 11 12 13\n", ":2: more than 12 fields", ""},
        {"coop-trace 1\nA 1 2 3", ":2: the last line has no newline", "truncated"},
        {"coop-trace 1\nA 1 2 \0003\n", ":2: NUL byte", ""},
        {"\x1f\x8b\x08\x00garbage\n", "read error", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trace t;
        char path[300];
        fixture_path(path, sizeof path, "bad.trace");
        /* the NUL case needs its real length */
        size_t len = strlen(cases[i].text);
        if (strstr(cases[i].expect1, "NUL"))
            len += 1 + strlen(cases[i].text + len + 1);
        fixture_write(path, cases[i].text, len, 0);
        coop_status st = trace_read_text(path, &t);
        if (st == COOP_OK)
            fail_msg("case %zu was accepted", i);
        if (!strstr(coop_last_error(), cases[i].expect1) ||
            !strstr(coop_last_error(), cases[i].expect2))
            fail_msg("case %zu: \"%s\" lacks \"%s\" or \"%s\"", i, coop_last_error(),
                     cases[i].expect1, cases[i].expect2);
        if (strncmp(coop_last_error(), path, strlen(path)) != 0)
            fail_msg("case %zu: \"%s\" does not start with the file name", i, coop_last_error());
        assert_null(t.events);
    }
}

/* E lines may appear anywhere (traces/README.md): one before an L line is
 * not an event, and the L line stays legal. */
static void test_e_lines_anywhere(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(read_text("coop-trace 1\nE 0x200000 2097152 0\nL 1 100 0\nA 2 50 0\n"
                               "E 0x400000 2097152\nF 1\n",
                               0, &t),
                     COOP_OK);
    assert_int_equal(t.num_live_at_start, 1);
    assert_int_equal(t.num_events, 3);
    assert_int_equal(t.num_final_segments, 2);
    assert_int_equal(t.final_segments[1].addr, 0x400000);
    trace_free(&t);
}

/* E lines that share no byte are read: one whose end (addr + size) is
 * 2^64 - 1, the largest end both readers take (the snapshot reader's
 * check_segments too), and one of no bytes inside another (it reserves
 * nothing). */
static void test_e_lines_sharing_no_byte(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(read_text("coop-trace 1\nE 0x1000 4096\nE 0x1800 0\n"
                               "E 0xfffffffffffff000 4095\n",
                               0, &t),
                     COOP_OK);
    assert_int_equal(t.num_final_segments, 3);
    assert_int_equal(t.final_segments[2].addr, 0xfffffffffffff000);
    assert_int_equal(t.final_segments[2].size, 4095);
    trace_free(&t);
}

/* Many lines across the reader's 64 KiB chunks, with ids reused. */
static void test_many_lines(void **state)
{
    (void)state;
    size_t cap = 1 << 21, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "coop-trace 1\n");
    for (int i = 0; i < 30000; i++)
        n += (size_t)snprintf(text + n, cap - n, "A %d %d 0 t=%d\nR %d\nF %d\n", i % 97, i + 1, i,
                              i % 97, i % 97);
    trace t;
    assert_int_equal(read_text(text, 0, &t), COOP_OK);
    fixture_check_invariants(&t);
    assert_int_equal(t.num_events, 90000);
    assert_int_equal(t.num_ids, 30000);
    assert_int_equal(t.events[3 * 29999].size, 30000);
    assert_int_equal(t.events[3 * 29999].time_us, 29999);
    trace_free(&t);
    free(text);
}

static void test_long_line(void **state)
{
    (void)state;
    size_t n = (1 << 20) + 100;
    char *text = malloc(n + 32);
    strcpy(text, "coop-trace 1\n# ");
    memset(text + 15, 'x', n);
    strcpy(text + 15 + n, "\n");
    trace t;
    fixture_expect_error(read_text(text, 1, &t), ":2: line longer than", NULL);
    /* the bound is exact: a line of 1 MiB is read, one of 1 MiB + 1 is not */
    for (size_t extra = 0; extra < 2; extra++) {
        size_t line = TRACE_INPUT_MAX_LINE + extra;
        memset(text + 13, 'x', line); /* after "coop-trace 1\n" */
        text[13] = '#';
        strcpy(text + 13 + line, "\n");
        coop_status st = read_text(text, 0, &t);
        if (extra) {
            fixture_expect_error(st, ":2: line longer than 1048576 bytes", NULL);
        } else {
            assert_int_equal(st, COOP_OK);
            trace_free(&t);
        }
    }
    free(text);
}

/* A message cut to fit ends between characters, not inside one: a field of
 * 2-byte characters cut by the message's 384 bytes, and one whose control
 * characters, written as \xNN, outgrow the escaped copy. */
static void test_messages_cut_whole_characters(void **state)
{
    (void)state;
    for (size_t controls = 0; controls <= 60; controls += 60) {
        char text[1024] = "coop-trace 1\nA 1 ";
        size_t k = strlen(text);
        for (size_t i = 0; i < controls; i++)
            text[k++] = '\x01';
        for (size_t i = 0; i < 200; i++) { /* U+00E9, 2 bytes */
            text[k++] = '\xc3';
            text[k++] = '\xa9';
        }
        strcpy(text + k, " 0\n");
        trace t;
        fixture_expect_error(read_text(text, 0, &t), ":2: size '", NULL);
        const unsigned char *m = (const unsigned char *)coop_last_error();
        for (size_t i = 0; m[i];) {
            size_t n = utf8_sequence_length(m + i);
            if (!n)
                fail_msg("%zu controls: byte %zu of \"%s\" is no whole character", controls, i,
                         coop_last_error());
            i += n;
        }
    }
}

/* A long path in a "cannot open" message keeps its start and end around
 * "...", cut between characters, so the reason after it fits the message:
 * paths of 2-, 3- and 4-byte characters at every alignment. */
static void test_long_paths_shown_shortened(void **state)
{
    (void)state;
    char shown[TRACE_INPUT_SHOWN_PATH];
    assert_ptr_equal(trace_input_shown_path(shown, "short/path"), (const void *)"short/path");
    static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    for (size_t c = 0; c < 3; c++)
        for (size_t shift = 0; shift < 4; shift++) {
            char path[2048] = "";
            memset(path, '/', shift);
            path[shift] = '\0';
            while (strlen(path) + strlen(chars[c]) + 6 < sizeof path)
                strcat(path, chars[c]);
            strcat(path, "/end");
            const char *s = trace_input_shown_path(shown, path);
            size_t n = strlen(s);
            assert_ptr_equal(s, shown);
            assert_true(n < TRACE_INPUT_SHOWN_PATH && n > TRACE_INPUT_SHOWN_PATH - 12);
            assert_non_null(strstr(s, "..."));
            assert_memory_equal(s, path, (size_t)(strstr(s, "...") - s));
            assert_string_equal(strstr(s, "...") + 3,
                                path + strlen(path) - strlen(strstr(s, "...") + 3));
            for (size_t i = 0; s[i];) {
                size_t k = utf8_sequence_length((const unsigned char *)s + i);
                if (!k)
                    fail_msg("char %zu shift %zu: byte %zu of the shown path is no whole character",
                             c, shift, i);
                i += k;
            }
        }
}

/* A valid trace cut at every byte: a cut inside a line is an error (the last
 * line has no newline); a cut at a line end may be a valid shorter trace.
 * Compressed, every cut is an error. */
static void test_truncated(void **state)
{
    (void)state;
    size_t len;
    unsigned char *text = fixture_read(COOP_TEST_SRCDIR "/tests/data/example.trace", &len);
    char path[300], gz_path[300];
    fixture_path(path, sizeof path, "cut.trace");
    fixture_path(gz_path, sizeof gz_path, "whole.trace.gz");
    for (size_t cut = 0; cut < len; cut++) {
        fixture_write(path, text, cut, 0);
        trace t;
        coop_status st = trace_read_text(path, &t);
        if (cut == 0 || text[cut - 1] != '\n') {
            if (st == COOP_OK)
                fail_msg("cut at %zu of %zu accepted", cut, len);
        } else if (st == COOP_OK) {
            fixture_check_invariants(&t);
            trace_free(&t);
        }
    }
    fixture_write(gz_path, text, len, 1);
    fixture_refuses_gzip_prefixes(trace_read_text, gz_path, path);
    free(text);
}

static void test_numbers(void **state)
{
    (void)state;
    uint64_t u;
    int64_t i;
    assert_int_equal(text_parse_u64("0", &u), TEXT_NUMBER_OK);
    assert_int_equal(u, 0);
    assert_int_equal(text_parse_u64("18446744073709551615", &u), TEXT_NUMBER_OK);
    assert_true(u == UINT64_MAX);
    assert_int_equal(text_parse_u64("0xFFFFffffFFFFffff", &u), TEXT_NUMBER_OK);
    assert_true(u == UINT64_MAX);
    assert_int_equal(text_parse_u64("0x10", &u), TEXT_NUMBER_OK);
    assert_int_equal(u, 16);
    assert_int_equal(text_parse_u64("18446744073709551616", &u), TEXT_NUMBER_OVERFLOW);
    assert_int_equal(text_parse_u64("99999999999999999999999", &u), TEXT_NUMBER_OVERFLOW);
    assert_int_equal(text_parse_u64("0x10000000000000000", &u), TEXT_NUMBER_OVERFLOW);
    assert_int_equal(text_parse_u64("-1", &u), TEXT_NUMBER_NEGATIVE);
    assert_int_equal(text_parse_u64("", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("0x", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("12a", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64(" 1", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("+1", &u), TEXT_NUMBER_INVALID);
    /* a minus sign alone or before a non-digit is no number, not a negative one */
    assert_int_equal(text_parse_u64("-", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("-x1", &u), TEXT_NUMBER_INVALID);
    /* "-0" is zero with a sign, not a negative number; junk after "-5" is no number */
    assert_int_equal(text_parse_u64("-0", &u), TEXT_NUMBER_SIGNED);
    assert_int_equal(text_parse_u64("-0x0", &u), TEXT_NUMBER_SIGNED);
    assert_int_equal(text_parse_u64("-00", &u), TEXT_NUMBER_SIGNED);
    assert_int_equal(text_parse_u64("-5x", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("-99999999999999999999", &u), TEXT_NUMBER_NEGATIVE);
    assert_int_equal(text_parse_i64("--0", &i), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_u64("99999999999999999999x", &u), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_i64("-9223372036854775808", &i), TEXT_NUMBER_OK);
    assert_true(i == INT64_MIN);
    assert_int_equal(text_parse_i64("9223372036854775807", &i), TEXT_NUMBER_OK);
    assert_true(i == INT64_MAX);
    assert_int_equal(text_parse_i64("-9223372036854775809", &i), TEXT_NUMBER_OVERFLOW);
    assert_int_equal(text_parse_i64("--1", &i), TEXT_NUMBER_INVALID);
    assert_int_equal(text_parse_i64("-", &i), TEXT_NUMBER_INVALID);
}

/* The largest size a trace may carry, 2^56 - 1, is read (2^56 is refused:
 * test_bad_lines). */
static void test_largest_size(void **state)
{
    (void)state;
    static const char text[] = "coop-trace 1\nA 1 72057594037927935 0\nE 0 0xffffffffffffff\n";
    char path[300];
    fixture_path(path, sizeof path, "largest.trace");
    fixture_write(path, text, strlen(text), 0);
    trace t;
    assert_int_equal(trace_read_text(path, &t), COOP_OK);
    assert_true(t.events[0].size == (1ull << 56) - 1);
    assert_true(t.final_segments[0].size == (1ull << 56) - 1);
    trace_free(&t);
}

/* The writer's exact lines: addr= only for a known address, cost= only when
 * given, O's size before its stream, only the settings that are set, a
 * control character in the name as '?'. */
static void test_written_lines(void **state)
{
    (void)state;
    static const char in[] = "coop-trace 1\n"
                             "P torch max_split_size\n"
                             "L 1 512 0\n"
                             "A 2 1024 7 addr=0x2000 t=5 cost=9\n"
                             "A 3 512 0\n"
                             "R 2 t=6\n"
                             "F 2\n"
                             "O 4096 7 t=8\n"
                             "S 0x1000 2097152 3\n"
                             "F 3\n"
                             "E 0x1000 2097152 3\n";
    static const char want[] = "coop-trace 1\n"
                               "# from a?b\n"
                               "# 8 events, 3 ids, 1 live at start, 1 final segments\n"
                               "P torch max_split_size\n"
                               "L 0 512 0\n"
                               "A 1 1024 7 addr=0x2000 t=5 cost=9\n"
                               "A 2 512 0\n"
                               "R 1 t=6\n"
                               "F 1\n"
                               "O 4096 7 t=8\n"
                               "S 0x1000 2097152 3\n"
                               "F 2\n"
                               "E 0x1000 2097152 3\n";
    char path[300];
    fixture_path(path, sizeof path, "lines.trace");
    fixture_write(path, in, strlen(in), 0);
    trace t;
    assert_int_equal(trace_read_text(path, &t), COOP_OK);
    free(t.name);
    t.name = strdup("a\x1f"
                    "b");
    assert_non_null(t.name);
    fixture_path(path, sizeof path, "lines.out");
    assert_int_equal(trace_write_text(&t, path), COOP_OK);
    trace_free(&t);
    size_t len;
    unsigned char *out = fixture_read(path, &len);
    char got[1024];
    int same = len == strlen(want) && memcmp(out, want, len) == 0;
    snprintf(got, sizeof got, "%.*s", (int)(len < sizeof got ? len : sizeof got - 1),
             (const char *)out);
    free(out);
    if (!same) {
        fail_msg("wrote:\n%s\nexpected:\n%s", got, want);
        return;
    }
}

/* Writing then reading gives the same trace, plain and compressed. */
static void test_round_trip(void **state)
{
    (void)state;
    trace a, b;
    assert_int_equal(trace_read_text(COOP_TEST_SRCDIR "/tests/data/example.trace", &a), COOP_OK);
    char path[300];
    const char *names[] = {"rt.trace", "rt.trace.gz"};
    for (int k = 0; k < 2; k++) {
        fixture_path(path, sizeof path, names[k]);
        assert_int_equal(trace_write_text(&a, path), COOP_OK);
        size_t len;
        unsigned char *bytes = fixture_read(path, &len);
        /* gzip magic only when asked for */
        assert_int_equal(len > 2 && bytes[0] == 0x1f && bytes[1] == 0x8b, k == 1);
        free(bytes);
        assert_int_equal(trace_read_text(path, &b), COOP_OK);
        fixture_assert_same_trace(&a, &b);
        trace_free(&b);
    }
    /* negative times survive; a name cannot inject lines */
    a.events[1].time_us = -5;
    free(a.name);
    a.name = strdup("evil\nA 99 1 0\n");
    fixture_path(path, sizeof path, "rt2.trace");
    assert_int_equal(trace_write_text(&a, path), COOP_OK);
    assert_int_equal(trace_read_text(path, &b), COOP_OK);
    assert_int_equal(b.events[1].time_us, -5);
    fixture_assert_same_trace(&a, &b);
    trace_free(&b);
    /* compression by flag, whatever the name */
    fixture_path(path, sizeof path, "rt.tmp");
    assert_int_equal(trace_write_text_to(&a, path, true), COOP_OK);
    assert_int_equal(trace_read(path, &b), COOP_OK);
    fixture_assert_same_trace(&a, &b);
    trace_free(&b);
    /* a snapshot's PyTorch settings survive (P line): none, and two not default */
    for (unsigned bits = 0; bits <= (TRACE_TORCH_EXPANDABLE_SEGMENTS | TRACE_TORCH_GC_THRESHOLD);
         bits += TRACE_TORCH_EXPANDABLE_SEGMENTS | TRACE_TORCH_GC_THRESHOLD) {
        a.has_torch_settings = 1;
        a.torch_settings = bits;
        fixture_path(path, sizeof path, "rt3.trace");
        assert_int_equal(trace_write_text(&a, path), COOP_OK);
        assert_int_equal(trace_read_text(path, &b), COOP_OK);
        assert_int_equal(b.has_torch_settings, 1);
        assert_int_equal(b.torch_settings, bits);
        trace_free(&b);
    }
    a.has_torch_settings = 0;
    a.torch_settings = 0;
    /* a snapshot coop.torch wrote stays one (P coop): its recorded row is coop's */
    a.recorded_by_coop = 1;
    fixture_path(path, sizeof path, "rt4.trace");
    assert_int_equal(trace_write_text(&a, path), COOP_OK);
    assert_int_equal(trace_read_text(path, &b), COOP_OK);
    assert_int_equal(b.recorded_by_coop, 1);
    assert_int_equal(b.has_torch_settings, 0);
    trace_free(&b);
    a.recorded_by_coop = 0;
    /* a directory that does not exist */
    fixture_path(path, sizeof path, "no/such/dir.trace");
    fixture_expect_error(trace_write_text(&a, path), "no/such/dir.trace: cannot write", NULL);
    /* a trace that breaks the canonical form is refused, not mis-written */
    a.live_at_start[0] = 1;
    fixture_path(path, sizeof path, "bad.trace");
    fixture_expect_error(trace_write_text(&a, path), "not the alloc of live-at-start id 1", NULL);
    /* more live-at-start ids than events */
    uint32_t live = 0;
    trace z = {.live_at_start = &live, .num_live_at_start = 1};
    fixture_expect_error(trace_write_text(&z, path), "trace has more live-at-start ids than events",
                         NULL);
    trace_free(&a);
}

int main(void)
{
    fixture_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readme_example),
        cmocka_unit_test(test_all_lines),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_many_lines),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_written_lines),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_largest_size),
        cmocka_unit_test(test_e_lines_anywhere),
        cmocka_unit_test(test_e_lines_sharing_no_byte),
        cmocka_unit_test(test_messages_cut_whole_characters),
        cmocka_unit_test(test_long_paths_shown_shortened),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_cleanup();
    return failed;
}
