/* DTR log reader: structure, gzip, errors with line numbers, allocation events. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "status.h"
#include "trace/dtr_log.h"
#include "trace/name_table.h"
#include "trace/trace.h"
#include "utf8_valid.h"

static const char small_log[] =
    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"pre\"}\n"
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"pre\",\"MEMORY\":\"8\"}\n"
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"}\n"
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"100\"}\n"
    "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"split\",\"ARGS\":[\"w\"],\"RESULT\":[\"a\",\"v\"],"
    "\"TIME\":\"10\"}\n"
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"64\"}\n"
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"-1\"}\n"
    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"v\",\"MEMORY\":\"100\"}\n"
    "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"v\",\"ALIAS\":\"0\"}\n"
    "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"add_\",\"ARGS\":[\"a\",\"w\"],\"MUTATE\":[0],"
    "\"TIME\":7}\n"
    "{\"INSTRUCTION\":\"COPY\",\"DST\":\"a2\",\"SRC\":\"a\"}\n"
    "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n"
    "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"BACKWARD\"}\n"
    "{\"INSTRUCTION\":\"COPY_FROM\",\"DST\":\"a2\",\"SRC\":\"v\"}\n"
    "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"v\"}\n";

static void parses_structure(void **state)
{
    (void)state;
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("t.log", small_log, strlen(small_log), &log), COOP_OK);
    assert_int_equal(log.num_instrs, 10);
    assert_int_equal(log.start, 2); /* after the pre-START constant and START */
    const dtr_instr *call = &log.instrs[3];
    assert_int_equal(call->kind, DTR_CALL);
    assert_int_equal(call->line, 6);
    assert_int_equal(call->time_ns, 10);
    assert_int_equal(call->num_results, 2);
    assert_string_equal(log.op_names[call->op], "split");
    assert_string_equal(log.names[log.args[call->first_arg]], "w");
    const dtr_result *r = &log.results[call->first_result];
    assert_string_equal(log.names[r[0].name], "a");
    assert_int_equal(r[0].memory, 64);
    assert_int_equal(r[0].alias, DTR_FRESH);
    assert_int_equal(r[1].alias, 0);
    const dtr_instr *mut = &log.instrs[4];
    assert_int_equal(mut->kind, DTR_MUTATE);
    assert_int_equal(mut->time_ns, 7); /* integer TIME accepted too */
    assert_int_equal(mut->num_mutates, 1);
    assert_int_equal(log.mutates[mut->first_mutate], 0);
    assert_int_equal(log.instrs[5].kind, DTR_COPY);
    assert_int_equal(log.instrs[8].kind, DTR_COPY_FROM);
    assert_int_equal(log.instrs[7].annotation, DTR_ANNOT_BACKWARD);
    dtr_log_free(&log);
}

/* The first START annotation marks the start; a later one changes nothing. */
static void first_start_counts(void **state)
{
    (void)state;
    static const char text[] = "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
                               "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                               "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"4\"}\n"
                               "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n";
    dtr_log log;
    assert_int_equal(dtr_log_parse_buffer("s.log", text, sizeof text - 1, &log), COOP_OK);
    assert_int_equal(log.num_instrs, 3);
    assert_int_equal(log.start, 1);
    dtr_log_free(&log);
}

/* MEMORY and TIME of 0 as plain JSON integers are read (0 is not negative). */
static void zero_integers_are_read(void **state)
{
    (void)state;
    static const char text[] =
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":0}\n"
        "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
        "\"TIME\":0}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":0}\n"
        "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":0}\n";
    dtr_log log;
    if (dtr_log_parse_buffer("zero.log", text, sizeof text - 1, &log) != COOP_OK) {
        fail_msg("%s", coop_last_error());
        return;
    }
    assert_int_equal(log.num_instrs, 2);
    assert_int_equal(log.instrs[0].memory, 0);
    assert_int_equal(log.instrs[1].time_ns, 0);
    assert_int_equal(log.results[0].memory, 0);
    assert_int_equal(log.results[0].alias, 0);
    dtr_log_free(&log);
}

/* Parses text expected to fail and checks the message names the line. */
static void expect_error(const char *text, const char *want)
{
    dtr_log log;
    coop_status st = dtr_log_parse_buffer("bad.log", text, strlen(text), &log);
    assert_int_equal(st, COOP_ERR_INVALID);
    if (!strstr(coop_last_error(), want))
        fail_msg("message \"%s\" lacks \"%s\"", coop_last_error(), want);
    assert_null(log.instrs);
}

static void errors_name_the_line(void **state)
{
    (void)state;
    expect_error("{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n{oops\n",
                 "bad.log:2: invalid JSON");
    expect_error("{\"INSTRUCTION\":\"FROB\"}\n", "bad.log:1: unknown INSTRUCTION \"FROB\"");
    /* control characters (JSON escapes) are shown escaped, not written raw */
    expect_error("{\"INSTRUCTION\":\"\\u001b[2J\\r\"}\n",
                 "bad.log:1: unknown INSTRUCTION \"\\x1b[2J\\x0d\"");
    /* a number beyond 64 bits is out of range, not "not an integer"; a bad
     * value is shown (as scripts/record_ops.py --check shows it) */
    static const char constant[] = "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n";
    static const struct {
        const char *value, *want;
    } memory[] = {
        {"\"18446744073709551616\"",
         "bad.log:2: field MEMORY \"18446744073709551616\" is out of range (at most 2^64-1)"},
        {"\"0x10\"", "bad.log:2: field MEMORY is not a non-negative integer: \"0x10\""},
        {"\"+5\"", "bad.log:2: field MEMORY is not a non-negative integer: \"+5\""},
        {"-3", "bad.log:2: field MEMORY is not a non-negative integer: -3"},
        {"1e3", "bad.log:2: field MEMORY is not a non-negative integer: 1000"},
        {"null", "bad.log:2: field MEMORY is not a non-negative integer: null"},
        {"[1]", "bad.log:2: field MEMORY is not a non-negative integer: an array"},
        /* cut at 40 bytes between characters, not inside a 2-byte one (the
         * 20th e-acute spans bytes 39 and 40) */
        {"\"a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\"",
         "bad.log:2: field MEMORY is not a non-negative integer: "
         "\"a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\xc3\xa9"
         "\xc3\xa9\xc3\xa9\xc3\xa9...\""},
    };
    for (size_t i = 0; i < sizeof memory / sizeof memory[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":%s}\n",
                 constant, memory[i].value);
        expect_error(text, memory[i].want);
    }
    /* a key given twice is ambiguous: jansson kept the last one, so this
     * log's x was 99999999 bytes without a word */
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"16\",\"MEMORY\":"
                 "\"99999999\"}\n",
                 "bad.log:2: invalid JSON at column 57: duplicate object key near '\"MEMORY\"'");
    /* no instructions: coop sim ran these as a program of 0 bytes */
    expect_error("", "bad.log: no instructions: the log is empty or blank");
    expect_error("\n\n\r\n", "bad.log: no instructions");
    /* a line of spaces or tabs is blank too: it was "invalid JSON at column 3:
     * '[' or '{' expected near end of file" */
    expect_error(" \t \n\t\r\n", "bad.log: no instructions");
    /* an ALIAS string is a decimal integer as MEMORY and TIME are: strtoll
     * took leading spaces and a plus sign */
    static const char *const aliases[] = {"\" -1\"", "\"+0\"", "\"\\t0\""};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":%s}\n",
                 aliases[i]);
        expect_error(text, "bad.log:5: field ALIAS is not an integer");
    }
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n  \n{oops\n",
                 "bad.log:3: invalid JSON");
    expect_error("{\"NAME\":\"x\"}\n", "bad.log:1: missing field INSTRUCTION");
    expect_error("[1,2]\n", "bad.log:1: line is not a JSON object");
    expect_error("{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"4\"}\n",
                 "bad.log:1: MEMORY line without a preceding CALL");
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"-4\"}\n",
                 "bad.log:2: field MEMORY is not a non-negative integer");
    /* past 2^64 - 1: strtoull's ERANGE, not its saturated value */
    expect_error(
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"18446744073709551616\"}\n",
        "bad.log:2: field MEMORY \"18446744073709551616\" is out of range");
    /* sizes are below 2^56, and all of them together below 2^63, so that no
     * sum of live tensors (the simulator's peak) wraps */
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"72057594037927936\"}\n",
                 "bad.log:2: MEMORY 72057594037927936 is too large (sizes must be below 2^56)");
    {
        /* 128 constants of 2^56 - 1 bytes fit below 2^63; the 129th does not */
        static char big[129 * 120];
        size_t n = 0;
        for (int i = 0; i < 129; i++)
            n += (size_t)snprintf(big + n, sizeof big - n,
                                  "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c%d\"}\n"
                                  "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c%d\",\"MEMORY\":"
                                  "\"72057594037927935\"}\n",
                                  i, i);
        assert_true(n < sizeof big);
        expect_error(big, "bad.log:258: the MEMORY values add up to 2^63 bytes or more");
    }
    /* TIMEs, each once per output, add up to below 2^61 ns, so that the
     * simulator's base compute and clock do not wrap (two TIMEs of 2^63
     * gave a base compute of 0: every recompute thrashed) */
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"a\"],"
                 "\"TIME\":\"9223372036854775808\"}\n",
                 "bad.log:1: TIME 9223372036854775808: the TIME values (each once per output) "
                 "add up to 2^61 ns or more");
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"a\"],"
                 "\"TIME\":\"1152921504606846976\"}\n" /* 2^60 */
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"-1\"}\n"
                 "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"g_\",\"ARGS\":[\"a\",\"a\"],"
                 "\"MUTATE\":[0,1],\"TIME\":\"576460752303423488\"}\n", /* 2^59, twice */
                 "bad.log:4: TIME 576460752303423488: the TIME values");
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"x\",\"ALIAS\":\"-1\"}\n",
                 "bad.log:2: ALIAS after CONSTANT (expected MEMORY)");
    expect_error("{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"g_\",\"ARGS\":[\"a\"],\"MUTATE\":0,"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:1: field MUTATE is missing or not an array");
    /* an empty ALIAS string is no integer (strtoll reads it as 0) */
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"a\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"\"}\n",
                 "bad.log:3: field ALIAS is not an integer");
    /* a MUTATE of no argument counts its TIME once */
    expect_error("{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"g_\",\"ARGS\":[],\"MUTATE\":[],"
                 "\"TIME\":\"2305843009213693952\"}\n", /* 2^61 */
                 "bad.log:1: TIME 2305843009213693952: the TIME values");
    {
        /* 2^60 - 1 and 2^60 in one output each stay below the limit */
        static const char ok[] =
            "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"a\"],"
            "\"TIME\":\"1152921504606846975\"}\n"
            "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"a\",\"MEMORY\":\"4\"}\n"
            "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\",\"ALIAS\":\"-1\"}\n"
            "{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"g_\",\"ARGS\":[\"a\"],"
            "\"MUTATE\":[0],\"TIME\":\"1152921504606846976\"}\n";
        dtr_log log;
        assert_int_equal(dtr_log_parse_buffer("ok.log", ok, sizeof ok - 1, &log), COOP_OK);
        dtr_log_free(&log);
    }
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:2: CALL before the MEMORY/ALIAS lines of the CONSTANT on line 1");
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":\"3\"}\n",
                 "bad.log:3: ALIAS 3 of y is not -1 or an argument index");
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:2: log ends before the MEMORY/ALIAS lines");
    expect_error("{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"f_\",\"ARGS\":[\"a\"],\"MUTATE\":[1],"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:1: MUTATE index is not an argument index");
    expect_error("{\"INSTRUCTION\":\"MUTATE\",\"NAME\":\"f_\",\"ARGS\":[\"a\"],\"MUTATE\":[-1],"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:1: MUTATE index is not an argument index");
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[],"
                 "\"TIME\":\"1\"}\n",
                 "bad.log:1: CALL with an empty RESULT list");
    /* a CALL's MEMORY and ALIAS name its result */
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"z\",\"MEMORY\":\"4\"}\n",
                 "bad.log:2: MEMORY for z, expected it for result y of CALL on line 1");
    /* ALIAS is -1 or an argument index: one below, one past the last */
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":\"-2\"}\n",
                 "bad.log:3: ALIAS -2 of y is not -1 or an argument index (0..0)");
    expect_error("{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"4\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":\"1\"}\n",
                 "bad.log:3: ALIAS 1 of y is not -1 or an argument index (0..0)");
    /* a negative JSON integer is no size, as "-4" is not */
    expect_error("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":-4}\n",
                 "bad.log:2: field MEMORY is not a non-negative integer");
    /* a detail line out of order names the line of its CALL */
    expect_error("{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n"
                 "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"1\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":\"-1\"}\n",
                 "bad.log:3: ALIAS for y, expected MEMORY (CALL on line 2)");
    {
        /* the MEMORY total's bound is 2^63 itself: 128 constants of 2^56 - 1
         * and one of 128 bytes reach it exactly (refused), one of 127 not */
        static char big[130 * 120];
        for (int last = 127; last <= 128; last++) {
            size_t n = 0;
            for (int i = 0; i < 129; i++)
                n += (size_t)snprintf(big + n, sizeof big - n,
                                      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c%d\"}\n"
                                      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c%d\",\"MEMORY\":"
                                      "\"%llu\"}\n",
                                      i, i, i < 128 ? (1ull << 56) - 1 : (unsigned long long)last);
            assert_true(n < sizeof big);
            if (last == 128) {
                expect_error(big, "bad.log:258: the MEMORY values add up to 2^63 bytes or more");
            } else {
                dtr_log log;
                assert_int_equal(dtr_log_parse_buffer("ok.log", big, n, &log), COOP_OK);
                dtr_log_free(&log);
            }
        }
    }
}

/* A message quoting a long name, INSTRUCTION, JSON excerpt or file name is
 * cut between UTF-8 characters, not inside one: each case's text with a
 * name of 300 e-acute (600 bytes) behind 0 and 1 'a', so that some cut
 * lands inside a character. The reviewer's case first (the reader's
 * 256-byte buffers). (jansson's own text quotes no long token: it leaves
 * the "near '...'" out.) */
static void long_names_are_cut_between_characters(void **state)
{
    (void)state;
    static const struct {
        const char *format, *want; /* format: %s the long name */
    } cases[] = {
        {"{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
         "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"%s\",\"MEMORY\":\"4\"}\n",
         "bad.log:2: MEMORY for "},
        {"{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"r\"],\"TIME\":\"1\"}\n"
         "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"%s\",\"MEMORY\":\"4\"}\n",
         "bad.log:2: MEMORY for "},
        {"{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"r\"],\"TIME\":\"1\"}\n"
         "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"%s\",\"ALIAS\":\"-1\"}\n",
         "bad.log:2: ALIAS for "},
        {"{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"%s\"],"
         "\"TIME\":\"1\"}\n",
         NULL}, /* the ALIAS case below, its name a result's */
        {"{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[],\"RESULT\":[\"r\"],\"TIME\":\"1\"}\n"
         "{\"INSTRUCTION\":\"%s\"}\n",
         "bad.log:2: "}, /* INSTRUCTION NAME before ... */
        {"{\"INSTRUCTION\":\"%s\"}\n", "bad.log:1: unknown INSTRUCTION \""},
    };
    char name[2 * 300 + 2], text[2048];
    for (size_t k = 0; k < 2; k++) {
        name[0] = 'a';
        repeat_character(name + k, "\xc3\xa9", 300);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (!cases[i].want) { /* an ALIAS out of range names the result */
                snprintf(text, sizeof text, cases[i].format, name);
                snprintf(text + strlen(text), sizeof text - strlen(text),
                         "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"%s\",\"MEMORY\":\"4\"}\n"
                         "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"%s\",\"ALIAS\":\"7\"}\n",
                         name, name);
                expect_error(text, "bad.log:3: ALIAS 7 of ");
            } else {
                snprintf(text, sizeof text, cases[i].format, name);
                expect_error(text, cases[i].want);
            }
            char what[64];
            snprintf(what, sizeof what, "case %zu, %zu 'a'", i, k);
            expect_valid_utf8(what, coop_last_error());
            if (!strstr(coop_last_error(), "\xc3\xa9\xc3\xa9"))
                fail_msg("%s: the name is not quoted: \"%s\"", what, coop_last_error());
        }
        /* a long file name: the thread's message itself is cut */
        char path[1200] = "b";
        repeat_character(path + k, "\xc3\xa9", 550);
        dtr_log log;
        assert_int_equal(dtr_log_parse_buffer(path, "{\"INSTRUCTION\":\"FROB\"}\n", 24, &log),
                         COOP_ERR_INVALID);
        expect_valid_utf8("a long file name", coop_last_error());
    }
}

static char *write_gz(const char *text)
{
    char *path = strdup("/tmp/coop_dtr_test_XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    gzFile gz = gzdopen(fd, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, text, (unsigned)strlen(text)), (int)strlen(text));
    gzclose(gz);
    return path;
}

static void reads_gzip_files(void **state)
{
    (void)state;
    char *path = write_gz(small_log);
    dtr_log log;
    assert_int_equal(dtr_log_read(path, &log), COOP_OK);
    assert_int_equal(log.num_instrs, 10);
    assert_string_equal(log.path, path);
    dtr_log_free(&log);
    unlink(path);
    free(path);
}

static void read_errors_carry_the_path(void **state)
{
    (void)state;
    char *path = write_gz("{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n\"x\n");
    dtr_log log;
    assert_int_equal(dtr_log_read(path, &log), COOP_ERR_INVALID);
    char want[128];
    snprintf(want, sizeof want, "%s:2: invalid JSON", path);
    assert_non_null(strstr(coop_last_error(), want));
    unlink(path);
    free(path);
    assert_int_equal(dtr_log_read("/nonexistent/x.log", &log), COOP_ERR_INVALID);
    assert_non_null(strstr(coop_last_error(), "/nonexistent/x.log: cannot open"));
}

/* Writes len bytes to a fresh temporary file, plain; returns its path. */
static char *write_plain(const void *data, size_t len)
{
    char *path = strdup("/tmp/coop_dtr_test_XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

/* dtr_log_read fails with want (after "PATH") on path, and frees path. */
static void expect_read_error(char *path, const char *want)
{
    dtr_log log;
    assert_int_equal(dtr_log_read(path, &log), COOP_ERR_INVALID);
    assert_null(log.instrs);
    char msg[256];
    snprintf(msg, sizeof msg, "%s%s", path, want);
    if (!strstr(coop_last_error(), msg))
        fail_msg("\"%s\" lacks \"%s\"", coop_last_error(), msg);
    unlink(path);
    free(path);
}

/* Damaged files are errors with their line: a gzip stream cut short (zlib
 * reports it as Z_BUF_ERROR, which was read as the end of the log, so a cut
 * log passed for a shorter one), a last line without its newline, a NUL
 * byte (which cut its line short or joined it to the next) and a line over
 * TRACE_INPUT_MAX_LINE (which grew the buffer without bound). */
static void damaged_files_are_refused(void **state)
{
    (void)state;
    /* the gzip stream of small_log, cut at every length short of its end:
     * every cut is an error (the 8-byte trailer carries the length and CRC) */
    char *whole = write_gz(small_log);
    FILE *f = fopen(whole, "rb");
    assert_non_null(f);
    unsigned char gz[4096];
    size_t n = fread(gz, 1, sizeof gz, f);
    fclose(f);
    unlink(whole);
    free(whole);
    assert_true(n > 20 && n < sizeof gz);
    for (size_t cut = 1; cut < n; cut++) {
        char *path = write_plain(gz, cut);
        dtr_log log;
        if (dtr_log_read(path, &log) == COOP_OK)
            fail_msg("the gzip log cut to %zu of %zu bytes was accepted", cut, n);
        assert_null(log.instrs);
        unlink(path);
        free(path);
    }
    char *path = write_plain(gz, 40);
    expect_read_error(path, ": read error: file is truncated (gzip stream ends early)");

    const char *noeol = "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                        "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"8\"}";
    expect_read_error(write_plain(noeol, strlen(noeol)), ":2: the last line has no newline");

    static const char nul[] = "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                              "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"8\"}\n"
                              "\0{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"x\"}\n";
    expect_read_error(write_plain(nul, sizeof nul - 1), ":3: NUL byte in a text line");

    size_t big = ((size_t)1 << 20) + 100;
    char *line = malloc(big + 64);
    assert_non_null(line);
    int head = snprintf(line, 64, "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"");
    memset(line + head, 'a', big);
    memcpy(line + head + big, "\"}\n", 3);
    expect_read_error(write_plain(line, (size_t)head + big + 3),
                      ":1: line longer than 1048576 bytes");
    free(line);
}

/* Allocation events: views and mutations allocate nothing; the storage of a
 * and v (a view of w) is freed with its last name. */
static void derives_allocation_events(void **state)
{
    (void)state;
    char *path = write_gz(small_log);
    trace t;
    assert_int_equal(trace_read_dtr(path, &t), COOP_OK);
    /* allocs: w (100), a (64, cost 10). a2 holds a after RELEASE a; COPY_FROM
     * rebinds a2 to v (w's storage), which frees a's storage. */
    assert_int_equal(t.num_ids, 2);
    assert_int_equal(t.num_events, 3);
    assert_int_equal(t.events[0].kind, TRACE_ALLOC);
    assert_int_equal(t.events[0].size, 100);
    assert_int_equal(t.events[1].kind, TRACE_ALLOC);
    assert_int_equal(t.events[1].size, 64);
    assert_int_equal(t.events[1].cost_ns, 10);
    assert_int_equal(t.events[2].kind, TRACE_FREE);
    assert_int_equal(t.events[2].id, 1);
    assert_int_equal(t.events[2].size, 64); /* a free describes its allocation's block */
    trace_free(&t);
    unlink(path);
    free(path);
}

/* A CALL whose result rebinds the name of its own argument (x = view(x)):
 * the storage keeps its handle. Dropping the old binding before taking the
 * new one freed x's storage while x still named it, and RELEASE x freed it
 * again (two F lines for one id: a trace its own text reader refuses). */
static void view_rebinding_its_argument_keeps_the_storage(void **state)
{
    (void)state;
    char *path =
        write_gz("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"1024\"}\n"
                 "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"view\",\"ARGS\":[\"x\"],\"RESULT\":[\"x\"],"
                 "\"TIME\":\"5\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"x\",\"MEMORY\":\"1024\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"x\",\"ALIAS\":\"0\"}\n"
                 "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"relu\",\"ARGS\":[\"x\"],\"RESULT\":[\"y\"],"
                 "\"TIME\":\"5\"}\n"
                 "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"2048\"}\n"
                 "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":\"-1\"}\n"
                 "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"x\"}\n");
    trace t;
    assert_int_equal(trace_read_dtr(path, &t), COOP_OK);
    /* A x, A y, F x: x is live while y is allocated, and freed once */
    assert_int_equal(t.num_events, 3);
    assert_int_equal(t.events[0].kind, TRACE_ALLOC);
    assert_int_equal(t.events[1].kind, TRACE_ALLOC);
    assert_int_equal(t.events[1].size, 2048);
    assert_int_equal(t.events[2].kind, TRACE_FREE);
    assert_int_equal(t.events[2].id, 0);
    trace_free(&t);
    unlink(path);
    free(path);

    /* a CONSTANT rebinding a name drops the storage it named, as a CALL does
     * (the first storage stayed allocated to the end) */
    path = write_gz("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c\",\"MEMORY\":\"8\"}\n"
                    "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"c\"}\n"
                    "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"c\",\"MEMORY\":\"16\"}\n");
    assert_int_equal(trace_read_dtr(path, &t), COOP_OK);
    assert_int_equal(t.num_events, 3);
    assert_int_equal(t.events[2].kind, TRACE_FREE);
    assert_int_equal(t.events[2].id, 0);
    trace_free(&t);
    unlink(path);
    free(path);
}

/* FNV-1a, 32 bits, from its standard start: the name table's hash until
 * it took a per-table seed. */
static uint32_t unkeyed_fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Names a log chose so that the unkeyed hash sends them all to one slot of
 * a 4096-slot table: interning walked one cluster of all of them per name,
 * quadratic in the log (30,000 CONSTANTs with FNV multicollision names took
 * 2.8 s against 0.05 s; a million, an hour). With a seed only chance
 * clusters form, whatever the seed: the first seeded hash put the seed in
 * FNV's start only, whose low bits alone decide the hash's low bits, so
 * seeds with low bits zero (1 table in 64; the ones below) kept the
 * cluster, up to all 1500 names in one run. */
static size_t longest_run(uint64_t seed, int names)
{
    name_table t = {.seed = seed};
    char name[32];
    uint32_t counter = 0;
    for (uint32_t k = 0; k < (uint32_t)names; k++) {
        do
            snprintf(name, sizeof name, "n%" PRIu32, counter++);
        while (unkeyed_fnv1a(name) & 4095);
        uint32_t id;
        assert_int_equal(name_table_intern(&t, name, &id), 0);
        assert_int_equal(id, k);
    }
    assert_int_equal(t.num_slots, 4096);
    size_t longest = 0, run = 0;
    for (uint32_t i = 0; i < t.num_slots; i++) {
        run = t.slots[i] ? run + 1 : 0;
        if (run > longest)
            longest = run;
    }
    name_table_free(&t);
    return longest;
}

/* The name limit: ids are 32 bits (slots hold id + 1), and the slot count,
 * once a uint32_t, doubled to 0 past 2^30 names (then every insert wrote
 * outside the table). Names are not made 2^32 times over: the table is given
 * the count it would have, and refuses a new name with NAME_TABLE_FULL while
 * still finding a known one. */
static void test_name_table_refuses_past_its_limit(void **state)
{
    (void)state;
    name_table t = {0};
    uint32_t id;
    assert_int_equal(name_table_intern(&t, "x0", &id), 0);
    assert_int_equal(id, 0);
    uint32_t real = t.count;
    t.count = NAME_TABLE_MAX;
    assert_int_equal(name_table_intern(&t, "x1", &id), NAME_TABLE_FULL);
    assert_int_equal(name_table_intern(&t, "x0", &id), 0); /* found, not added */
    assert_int_equal(id, 0);
    t.count = real;
    name_table_free(&t);
}

/* The reader's refusals at its 32-bit limits, which take 2^32 - 1 names
 * or arguments to reach (tens of GB): the link wraps name_table_intern
 * (-Wl,--wrap=name_table_intern, src/remat/remat.mk) so that a test can
 * make it answer "full", or forge the log's argument count at the limit,
 * as test_name_table_refuses_past_its_limit forges the table's. */
int __real_name_table_intern(name_table *t, const char *name, uint32_t *id);
int __wrap_name_table_intern(name_table *t, const char *name, uint32_t *id);

static enum { INTERN_PLAIN, INTERN_FULL, INTERN_ARGS_AT_LIMIT } intern_next;
static dtr_log *intern_log; /* INTERN_ARGS_AT_LIMIT's */

int __wrap_name_table_intern(name_table *t, const char *name, uint32_t *id)
{
    if (intern_next == INTERN_FULL) {
        intern_next = INTERN_PLAIN;
        return NAME_TABLE_FULL;
    }
    int r = __real_name_table_intern(t, name, id);
    if (intern_next == INTERN_ARGS_AT_LIMIT) {
        intern_next = INTERN_PLAIN;
        intern_log->num_args = UINT32_MAX;
    }
    return r;
}

/* A full name table is bad input named as such, not out of memory
 * (mutant T4-36). */
static void test_a_full_name_table_is_not_out_of_memory(void **state)
{
    (void)state;
    static const char text[] = "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"}\n";
    dtr_log log;
    intern_next = INTERN_FULL;
    coop_status st = dtr_log_parse_buffer("full.log", text, sizeof text - 1, &log);
    assert_int_equal(intern_next, INTERN_PLAIN); /* it was asked */
    assert_int_equal(st, COOP_ERR_INVALID);
    char want[96];
    snprintf(want, sizeof want, "full.log:1: more than %" PRIu32 " distinct names",
             (uint32_t)NAME_TABLE_MAX);
    assert_string_equal(coop_last_error(), want);
}

/* Arguments past 2^32 - 1 in the log, counting those already read: a CALL
 * whose one argument brings the count to UINT32_MAX (forged as it is
 * interned) cannot stage its result (mutant T4-39: the bound without the
 * count already read). */
static void test_arguments_past_the_32_bit_index_are_refused(void **state)
{
    (void)state;
    static const char text[] = "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"w\"],"
                               "\"RESULT\":[\"a\"],\"TIME\":\"1\"}\n";
    dtr_log log;
    intern_log = &log;
    intern_next = INTERN_ARGS_AT_LIMIT; /* the line's first intern: its argument */
    coop_status st = dtr_log_parse_buffer("args.log", text, sizeof text - 1, &log);
    assert_int_equal(intern_next, INTERN_PLAIN);
    assert_int_equal(st, COOP_ERR_INVALID);
    assert_string_equal(coop_last_error(),
                        "args.log:1: more than 2^32 - 1 tensor arguments in the log");
}

static void test_chosen_names_do_not_cluster(void **state)
{
    (void)state;
    enum { N = 1500 };
    /* low bits zero, and tables seeded as readers seed them (0: drawn) */
    static const uint64_t seeds[] = {0x40,       0x8cea8340, 0xf9b40280, 0x486c1c40,
                                     1ull << 32, 0x1000,     0};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        for (int repeat = 0; repeat < (seeds[i] ? 1 : 20); repeat++) {
            size_t longest = longest_run(seeds[i], N);
            if (longest > 400)
                fail_msg("seed %#llx: a run of %zu used slots among %d names",
                         (unsigned long long)seeds[i], longest, N);
        }
}

/* Every name is found again, with its id, after the table has grown
 * (rehashed) three times: a rehash that put a name in a slot its lookup
 * does not probe would intern it a second time under a new id. */
static void test_names_are_found_after_the_table_grows(void **state)
{
    (void)state;
    enum { N = 3000 }; /* slots grow 1024 -> 2048 -> 4096 -> 8192 */
    name_table t = {0};
    char name[32];
    for (uint32_t k = 0; k < N; k++) {
        snprintf(name, sizeof name, "tensor.%" PRIu32, k);
        uint32_t id;
        assert_int_equal(name_table_intern(&t, name, &id), 0);
        assert_int_equal(id, k);
    }
    assert_int_equal(t.num_slots, 8192);
    for (uint32_t k = 0; k < N; k++) {
        snprintf(name, sizeof name, "tensor.%" PRIu32, k);
        uint32_t id = UINT32_MAX;
        if (name_table_find(&t, name, &id) != 0 || id != k)
            fail_msg("%s: found %d, id %" PRIu32 ", expected %" PRIu32, name,
                     name_table_find(&t, name, &id) == 0, id, k);
        assert_int_equal(name_table_intern(&t, name, &id), 0);
        assert_int_equal(id, k);
    }
    assert_int_equal(t.count, N);
    name_table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_structure),
        cmocka_unit_test(long_names_are_cut_between_characters),
        cmocka_unit_test(zero_integers_are_read),
        cmocka_unit_test(first_start_counts),
        cmocka_unit_test(errors_name_the_line),
        cmocka_unit_test(reads_gzip_files),
        cmocka_unit_test(read_errors_carry_the_path),
        cmocka_unit_test(derives_allocation_events),
        cmocka_unit_test(damaged_files_are_refused),
        cmocka_unit_test(view_rebinding_its_argument_keeps_the_storage),
        cmocka_unit_test(test_chosen_names_do_not_cluster),
        cmocka_unit_test(test_name_table_refuses_past_its_limit),
        cmocka_unit_test(test_a_full_name_table_is_not_out_of_memory),
        cmocka_unit_test(test_arguments_past_the_32_bit_index_are_refused),
        cmocka_unit_test(test_names_are_found_after_the_table_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
