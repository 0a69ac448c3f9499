/* COOP_ALLOC_CONF parsing: every key, every kind of bad value. */
#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coop.h"
#include "byte_size.h"
#include "torch/alloc_conf.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define TIB (1ull << 40)

static coop_alloc_conf parse_ok(const char *text)
{
    coop_alloc_conf conf;
    coop_status st = coop_alloc_conf_parse(text, &conf);
    if (st != COOP_OK)
        fail_msg("'%s' should parse: %s", text ? text : "(null)", coop_last_error());
    return conf;
}

/* text must fail; the message must contain each of the NULL-terminated
 * fragments; conf must stay as it was. */
static void parse_bad(const char *text, ...)
{
    coop_alloc_conf conf;
    memset(&conf, 0xab, sizeof conf);
    coop_alloc_conf before = conf;
    assert_int_equal(coop_alloc_conf_parse(text, &conf), COOP_ERR_INVALID);
    assert_memory_equal(&conf, &before, sizeof conf);
    const char *msg = coop_last_error();
    va_list ap;
    va_start(ap, text);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        if (!strstr(msg, frag))
            fail_msg("'%s': message '%s' lacks '%s'", text, msg, frag);
    va_end(ap);
}

static void test_defaults(void **state)
{
    (void)state;
    coop_alloc_conf conf = parse_ok(NULL);
    assert_int_equal(conf.backend, COOP_BACKEND_CUDA);
    assert_true(conf.use_vmm);
    assert_int_equal(conf.capacity, 0);
    assert_true(conf.fraction == 0.0);
    assert_int_equal(conf.placement, COOP_ALLOC_LOW);
    assert_false(conf.check);
    assert_int_equal(conf.history, 0);
    assert_false(conf.never_wait);
    coop_alloc_conf empty = parse_ok("");
    assert_memory_equal(&conf, &empty, sizeof conf);
    coop_alloc_conf commas = parse_ok(" , ,, ");
    assert_memory_equal(&conf, &commas, sizeof conf);
}

static void test_every_key(void **state)
{
    (void)state;
    coop_alloc_conf c = parse_ok("backend:host,capacity:40G,page:4M,vmm:false,segment:64M,"
                                 "placement:high,min_split:1K,check:true,history:500,wait:false");
    assert_int_equal(c.backend, COOP_BACKEND_HOST);
    assert_int_equal(c.capacity, 40 * GIB);
    assert_int_equal(c.page_size, 4 * MIB);
    assert_false(c.use_vmm);
    assert_int_equal(c.segment_size, 64 * MIB);
    assert_int_equal(c.placement, COOP_ALLOC_HIGH);
    assert_int_equal(c.min_split, KIB);
    assert_true(c.check);
    assert_int_equal(c.history, 500);
    assert_true(c.never_wait);
    assert_false(parse_ok("wait:true").never_wait);

    c = parse_ok(" backend : CUDA , fraction: 0.25 ,vmm:True,check:0,history:true,placement:low");
    assert_int_equal(c.backend, COOP_BACKEND_CUDA);
    assert_true(c.fraction == 0.25);
    assert_true(c.use_vmm);
    assert_false(c.check);
    assert_int_equal(c.history, COOP_ALLOC_CONF_DEFAULT_HISTORY);
    assert_int_equal(c.placement, COOP_ALLOC_LOW);
    assert_int_equal(parse_ok("history:false").history, 0);
    assert_int_equal(parse_ok("history:0").history, 0);
    assert_int_equal(parse_ok("history:1").history, 1);
    /* every size_t is a count, SIZE_MAX too (what coop_torch_settings writes
     * after coop_torch_record_history(SIZE_MAX)); one more is not */
    char text[64];
    snprintf(text, sizeof text, "history:%zu", (size_t)SIZE_MAX);
    assert_true(parse_ok(text).history == SIZE_MAX);
    snprintf(text, sizeof text, "history:%zu", (size_t)SIZE_MAX - 5);
    assert_true(parse_ok(text).history == SIZE_MAX - 5);
    snprintf(text, sizeof text, "history:%zu0", (size_t)SIZE_MAX / 10 + 1);
    parse_bad(text, "'history'", NULL);
    /* SIZE_MAX + 1 exactly: the last digit is the one that overflows */
    snprintf(text, sizeof text, "history:%zu%zu", (size_t)SIZE_MAX / 10, (size_t)SIZE_MAX % 10 + 1);
    parse_bad(text, "'history'", NULL);
    assert_true(parse_ok("fraction:1").fraction == 1.0);
    /* a subnormal fraction is in (0, 1]: strtod's ERANGE for it refused it
     * as "expected a number in (0, 1]"; it is one page, as fraction 0 of
     * set_per_process_memory_fraction is. Below the smallest double it
     * reads as 0, refused as such. */
    assert_true(parse_ok("fraction:1e-310").fraction == 1e-310);
    assert_true(parse_ok("fraction:5e-324").fraction > 0.0);
    parse_bad("fraction:1e-400", "'1e-400'", "(0, 1]", NULL);
    parse_bad("fraction:1e400", "'1e400'", "(0, 1]", NULL);
}

/* Each spelling of a boolean: true/1/yes and false/0/no, in any case. */
static void test_every_boolean_spelling(void **state)
{
    (void)state;
    static const char *const yes[] = {"vmm:true", "vmm:1", "vmm:yes", "vmm:YES"};
    static const char *const no[] = {"vmm:false", "vmm:0", "vmm:no", "vmm:No"};
    for (size_t i = 0; i < 4; i++) {
        assert_true(parse_ok(yes[i]).use_vmm);
        assert_false(parse_ok(no[i]).use_vmm);
    }
    assert_true(parse_ok("check:yes").check);
    assert_true(parse_ok("wait:no").never_wait);
    parse_bad("vmm:y", "'y'", "'vmm'", "true or false", NULL);
}

/* The smallest page is 512 bytes (a power of two >= 512): 512 itself is
 * accepted, 256 refused (test_bad_values_name_key_value_offset). */
static void test_page_of_512_bytes(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("page:512").page_size, 512);
    assert_int_equal(parse_ok("page:1K").page_size, KIB);
}

static void test_byte_suffixes(void **state)
{
    (void)state;
    /* suffixes in any case (1gb and 1gib used to be refused, 1gB and 1giB not) */
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {{"512", 512},
                 {"1K", KIB},
                 {"1k", KIB},
                 {"2KiB", 2 * KIB},
                 {"3KB", 3 * KIB},
                 {"5M", 5 * MIB},
                 {"5Mi", 5 * MIB},
                 {"7G", 7 * GIB},
                 {"80GiB", 80 * GIB},
                 {"1Ti", TIB},
                 {"2T", 2 * TIB},
                 {"4096B", 4096},
                 {"141G", 141 * GIB},
                 {"16777216", 16 * MIB},
                 {"1gb", GIB},
                 {"1gib", GIB},
                 {"1GIB", GIB},
                 {"1Gb", GIB},
                 {"2kb", 2 * KIB},
                 {"3mIb", 3 * MIB},
                 {"1tB", TIB},
                 {"512b", 512},
                 /* the grammar coop replay's --capacity had: hex, never octal */
                 {"0x1000", 4096},
                 {"0X10M", 16 * MIB},
                 {"08", 8},
                 {"0xffK", 255 * KIB},
                 /* the largest of each form parses: the overflow and range
                  * checks stop past 2^64 - 1, not at it */
                 {"18446744073709551615", UINT64_MAX},
                 {"0xffffffffffffffff", UINT64_MAX},
                 {"16777215T", UINT64_MAX - (TIB - 1)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 0;
        if (!byte_size_parse(cases[i].text, strlen(cases[i].text), &v))
            fail_msg("'%s' should parse", cases[i].text);
        assert_int_equal(v, cases[i].bytes);
    }
    static const char *const bad[] = {"",
                                      "G",
                                      "1X",
                                      "1GG",
                                      "1ib",
                                      "1gbi",
                                      "1gibb",
                                      "1bb",
                                      "-1",
                                      "0",
                                      "0G",
                                      "1.5G",
                                      " 1G",
                                      "1 G",
                                      "1iB",
                                      "99999999999999999999",
                                      "20000000T",
                                      "1Bi",
                                      "1GiBs",
                                      "0x",
                                      "0xG",
                                      "0x0",
                                      "x10",
                                      "0x1g2",
                                      "0x10000000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 42;
        if (byte_size_parse(bad[i], strlen(bad[i]), &v))
            fail_msg("'%s' should not parse", bad[i]);
        assert_int_equal(v, 42);
    }
}

static void test_bad_values_name_key_value_offset(void **state)
{
    (void)state;
    parse_bad("backend:rocm", "'rocm'", "'backend'", "byte 8", "cuda or host", NULL);
    parse_bad("capacity:lots", "'lots'", "'capacity'", "byte 9", NULL);
    /* 0 is refused (it is the "default" of coop_config, not a size one can ask
     * for): the message says so instead of asking for "a byte count" or "a
     * multiple of 512", which 0 is */
    parse_bad("capacity:0", "'0'", "'capacity'", "a byte count above 0", NULL);
    parse_bad("segment:0", "'0'", "'segment'", "a byte count above 0", NULL);
    parse_bad("min_split:0", "'0'", "'min_split'", "a multiple of 512 bytes above 0", NULL);
    parse_bad("vmm:true,capacity:12Q", "'12Q'", "'capacity'", "byte 18", NULL);
    parse_bad("fraction:0", "'0'", "'fraction'", "(0, 1]", NULL);
    parse_bad("fraction:1.5", "'1.5'", "'fraction'", NULL);
    parse_bad("fraction:nan", "'nan'", NULL);
    parse_bad("fraction:0.5x", "'0.5x'", NULL);
    parse_bad("page:3M", "'3M'", "'page'", "power of two", NULL);
    parse_bad("page:256", "'256'", "'page'", NULL);
    parse_bad("vmm:maybe", "'maybe'", "'vmm'", "true or false (or 1 / 0, yes / no)", NULL);
    parse_bad("segment:-1", "'-1'", "'segment'", NULL);
    parse_bad("placement:middle", "'middle'", "'placement'", "low or high", NULL);
    parse_bad("min_split:100", "'100'", "'min_split'", "multiple of 512", NULL);
    parse_bad("min_split:768", "'768'", "'min_split'", "multiple of 512", NULL);
    parse_bad("check:on", "'on'", "'check'", NULL);
    parse_bad("history:-5", "'-5'", "'history'", NULL);
    parse_bad("history:", "''", "'history'", NULL);
    parse_bad("wait:sometimes", "'sometimes'", "'wait'", "true or false", NULL);
    parse_bad("capacity:", "''", "'capacity'", NULL);
    /* sizes of 2^56 bytes or more: no pool takes them (coop_pool_create's
     * limit), so they are refused here, by key, instead of parsing and
     * failing every allocation (install() had succeeded) */
    parse_bad("capacity:65536T", "'65536T'", "'capacity'", "byte 9", "below 2^56", NULL);
    parse_bad("capacity:18446744073709551615", "'capacity'", "below 2^56", NULL);
    parse_bad("page:0x100000000000000", "'page'", "below 2^56", NULL);
    parse_bad("segment:65536Ti", "'segment'", "below 2^56", NULL);
    parse_bad("min_split:65536T", "'min_split'", "below 2^56", NULL);
    /* past 2^64 too: a number too large is said to be, not to be no byte
     * count ("expected a byte count above 0 such as 512M" read as if 'G'
     * were misspelt) */
    parse_bad("capacity:99999999999999999999G", "'99999999999999999999G'", "'capacity'",
              "below 2^56", NULL);
    parse_bad("segment:99999999999999999999", "'segment'", "below 2^56", NULL);
    parse_bad("page:20000000T", "'page'", "below 2^56", NULL);
    /* each message reads its prefix once: key, value, then what was expected */
    static const char *const once[] = {"capacity:65536T", "capacity:99999999999999999999G",
                                       "capacity:abc"};
    for (size_t i = 0; i < sizeof once / sizeof once[0]; i++) {
        coop_alloc_conf c;
        assert_int_equal(coop_alloc_conf_parse(once[i], &c), COOP_ERR_INVALID);
        const char *msg = coop_last_error();
        const char *prefix = "COOP_ALLOC_CONF: bad value '";
        assert_ptr_equal(strstr(msg, prefix), msg);
        assert_null(strstr(msg + 1, "COOP_ALLOC_CONF"));
        const char *expected = strstr(msg, ": expected ");
        assert_non_null(expected);
        assert_null(strstr(expected + 1, ": expected "));
    }
    coop_alloc_conf conf = parse_ok("capacity:65535T,page:0x80000000000000,segment:65535T");
    assert_true(conf.capacity == 65535 * TIB);
    assert_true(conf.page_size == UINT64_C(1) << 55);
}

static void test_bad_syntax(void **state)
{
    (void)state;
    parse_bad("expandable_segments:True", "unknown key 'expandable_segments'", "byte 0",
              "known:", NULL);
    parse_bad("vmm:true,colour:red", "unknown key 'colour'", "byte 9", NULL);
    parse_bad("check", "'check'", "has no value", NULL);
    parse_bad("vmm:true, history", "'history'", "byte 10", "no value", NULL);
    parse_bad(":5", "missing key", NULL);
    parse_bad("check:true,check:false", "'check' given twice", NULL);
    /* where each is, as every other refusal says where */
    parse_bad("capacity:1G,fraction:0.5", "exclusive", "'capacity' (byte 0)",
              "'fraction' (byte 12)", NULL);
    parse_bad("vmm:true, FRACTION:0.5,capacity:1G", "'FRACTION' (byte 10)", "'capacity' (byte 23)",
              NULL);
    /* control characters inside a key or value (trimming takes them at the
     * ends only) are shown as \xNN: printed raw on stderr, a carriage
     * return or an escape sequence hid or rewrote the message */
    parse_bad("ca\x1b[2Jpacity:1G", "unknown key 'ca\\x1b[2Jpacity'", NULL);
    parse_bad("capacity:1\rG", "bad value '1\\x0dG'", "'capacity'", NULL);
    parse_bad("check\x7f", "'check\\x7f' at byte 0 has no value", NULL);
    /* a byte that is not UTF-8 (Latin-1's e9) ending a key is shown, not
     * dropped as if it were a character cut short: the message named a key
     * 'capacit', one letter from a known key, that was never given. It is
     * written \xNN, as are C1 controls (U+0080..U+009F, U+009B a terminal's
     * CSI as ESC [ is), raw or as UTF-8; other UTF-8 text is shown as is */
    parse_bad("capacit\xe9:1G", "unknown key 'capacit\\xe9' at byte 0", NULL);
    parse_bad("capacity:1\xe9", "bad value '1\\xe9' for key 'capacity'", NULL);
    parse_bad("capacity:1\xc2\x9b"
              "2Jx",
              "bad value '1\\xc2\\x9b2Jx'", NULL);
    parse_bad("capacity:1\x9b"
              "2Jx",
              "bad value '1\\x9b2Jx'", NULL);
    parse_bad("capacit\xc3\xa9\xc2\xa0:1G", "unknown key 'capacit\xc3\xa9\xc2\xa0'", NULL);
}

/* A message quoting control characters longer than the message's buffer is
 * cut between escapes: a cut inside "\x1b" left "\x1", which reads as the
 * byte 01 (and "\" alone) */
static void test_long_escaped_value_is_cut_between_escapes(void **state)
{
    (void)state;
    char text[9 + 600 + 1] = "capacity:";
    memset(text + 9, 0x1b, 600);
    text[sizeof text - 1] = '\0';
    parse_bad(text, "bad value '\\x1b\\x1b", NULL);
    const char *msg = coop_last_error();
    const char *last = strrchr(msg, '\\');
    assert_non_null(last);
    assert_string_equal(last, "\\x1b' for key 'capacity' at byte 9: expected a byte count "
                              "above 0 such as 512M, 40G or 1Ti");
}

/* coop.torch and the ABI's failed-malloc record keep a message in 512
 * bytes: an unknown key of 200 escapes still leaves the known keys' list
 * whole there (it was cut at 511 bytes, inside the list) */
static void test_long_unknown_key_fits_in_512_bytes(void **state)
{
    (void)state;
    char text[200 + 3] = "";
    memset(text, 0x1b, 200);
    memcpy(text + 200, ":1", 3);
    parse_bad(text, "unknown key '\\x1b\\x1b", NULL);
    const char *msg = coop_last_error();
    assert_true(strlen(msg) < 512);
    assert_non_null(strstr(msg, "check, history, wait)"));
}

static void test_to_config(void **state)
{
    (void)state;
    coop_alloc_conf c = parse_ok("backend:host,capacity:1G,page:64K,vmm:false,segment:8M,"
                                 "min_split:1K,check:true,wait:false");
    coop_config config;
    coop_alloc_conf_to_config(&c, 3, &config);
    assert_int_equal(config.backend, COOP_BACKEND_HOST);
    assert_int_equal(config.device, 3);
    assert_int_equal(config.capacity, GIB);
    assert_int_equal(config.page_size, 64 * KIB);
    assert_false(config.use_vmm);
    assert_int_equal(config.segment_size, 8 * MIB);
    assert_int_equal(config.min_split, KIB);
    assert_true(config.check);
    assert_true(config.never_wait);
}

/* COOP_ALLOC_CONF is read, and coop_torch_normalize_conf writes it, in the
 * "C" locale whatever the host program set with setlocale: in a locale whose
 * decimal point is ',' (de_DE), strtod stopped at the '.' of "0.25" (the key
 * was refused) and the normalized text said "fraction:0,25", whose comma
 * splits the key:value list. Needs such a locale: COOP_TEST_LOCALE names it
 * (tests/locale_test.sh builds de_DE.UTF-8 with localedef and runs this
 * program so); skipped without one. */
static void fraction_ignores_the_host_locale(void **unused)
{
    (void)unused;
    const char *name = getenv("COOP_TEST_LOCALE");
    if (!name || !setlocale(LC_ALL, name) || strcmp(localeconv()->decimal_point, ",") != 0) {
        setlocale(LC_ALL, "C");
        print_message("no locale with ',' as decimal point (COOP_TEST_LOCALE): skipped\n");
        skip();
    }
    coop_alloc_conf conf;
    coop_status st = coop_alloc_conf_parse("fraction:0.25", &conf);
    char buf[512] = "";
    coop_status norm = coop_torch_normalize_conf("fraction:0.25,page:4M", buf, sizeof buf);
    setlocale(LC_ALL, "C"); /* before any assertion can end the test */
    if (st != COOP_OK)
        fail_msg("fraction:0.25 refused under %s: %s", name, coop_last_error());
    assert_true(conf.fraction == 0.25);
    assert_int_equal(norm, COOP_OK);
    if (!strstr(buf, ",fraction:0.25,"))
        fail_msg("normalized under %s: %s", name, buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_every_boolean_spelling),
        cmocka_unit_test(test_page_of_512_bytes),
        cmocka_unit_test(test_byte_suffixes),
        cmocka_unit_test(test_bad_values_name_key_value_offset),
        cmocka_unit_test(test_bad_syntax),
        cmocka_unit_test(test_long_escaped_value_is_cut_between_escapes),
        cmocka_unit_test(test_long_unknown_key_fits_in_512_bytes),
        cmocka_unit_test(test_to_config),
        cmocka_unit_test(fraction_ignores_the_host_locale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
