/* Status strings, the version, and the per-thread last error message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <cmocka.h>

#include "coop.h"
#include "status.h"
#include "utf8_valid.h"

/* Every status has its own text; values outside the enumeration (above it,
 * and negative ones, which an int status can hold) are "unknown status". */
static void test_strerror(void **state)
{
    (void)state;
    for (int i = 0; i < COOP_STATUS_COUNT; i++) {
        const char *text = coop_strerror((coop_status)i);
        assert_non_null(text);
        assert_true(text[0] != '\0');
        assert_string_not_equal(text, "unknown status");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(text, coop_strerror((coop_status)j));
    }
    assert_string_equal(coop_strerror(COOP_OK), "success");
    assert_string_equal(coop_strerror(COOP_ERR_NOMEM), "out of device memory");
    assert_string_equal(coop_strerror(COOP_ERR_BACKEND), "device backend call failed");
    assert_string_equal(coop_strerror(COOP_ERR_BUSY), "object is in use");
    assert_string_equal(coop_strerror(COOP_STATUS_COUNT), "unknown status");
    assert_string_equal(coop_strerror((coop_status)-1), "unknown status");
    assert_string_equal(coop_version(), COOP_VERSION_STRING);
}

/* coop_abi_size names every structure a binding mirrors, and nothing else. */
static void test_abi_size(void **state)
{
    (void)state;
    assert_int_equal(coop_abi_size("coop_config"), sizeof(coop_config));
    assert_int_equal(coop_abi_size("coop_stat"), sizeof(coop_stat));
    assert_int_equal(coop_abi_size("coop_stats"), sizeof(coop_stats));
    assert_int_equal(coop_abi_size("coop_block_info"), sizeof(coop_block_info));
    assert_int_equal(coop_abi_size("coop_segment_info"), sizeof(coop_segment_info));
    assert_int_equal(coop_abi_size("coop_torch_event"), sizeof(coop_torch_event));
    assert_int_equal(coop_abi_size("coop_torch_range"), sizeof(coop_torch_range));
    assert_int_equal(coop_abi_size("coop_torch_snapshot"), sizeof(coop_torch_snapshot));
    assert_int_equal(coop_abi_size(NULL), 0);
    assert_int_equal(coop_abi_size(""), 0);
    assert_int_equal(coop_abi_size("coop_stats "), 0);
    assert_int_equal(coop_abi_size("coop_pool"), 0); /* opaque */
}

/* coop_abi_offset gives each field's offsetof, by the names coop.h spells;
 * SIZE_MAX (not 0, a real offset) for NULL, an unknown structure or field. */
static void test_abi_offset(void **state)
{
    (void)state;
    assert_int_equal(coop_abi_offset("coop_torch_range", "address"),
                     offsetof(coop_torch_range, address));
    assert_int_equal(coop_abi_offset("coop_torch_range", "size"), offsetof(coop_torch_range, size));
    assert_true(offsetof(coop_torch_range, size) > 0); /* a swap would show */
    assert_int_equal(coop_abi_offset("coop_stat", "current"), 0);
    assert_int_equal(coop_abi_offset("coop_stats", "reserved_over_allocated"),
                     offsetof(coop_stats, reserved_over_allocated));
    assert_int_equal(coop_abi_offset("coop_stats", "requested_bytes"),
                     offsetof(coop_stats, requested_bytes));
    assert_int_equal(coop_abi_offset("coop_config", "fault_nth"), offsetof(coop_config, fault_nth));
    assert_int_equal(coop_abi_offset("coop_config", "never_wait"),
                     offsetof(coop_config, never_wait));
    assert_int_equal(coop_abi_offset("coop_block_info", "state"), offsetof(coop_block_info, state));
    assert_int_equal(coop_abi_offset("coop_segment_info", "num_blocks"),
                     offsetof(coop_segment_info, num_blocks));
    assert_int_equal(coop_abi_offset("coop_torch_event", "device"),
                     offsetof(coop_torch_event, device));
    assert_int_equal(coop_abi_offset("coop_torch_snapshot", "ranges"),
                     offsetof(coop_torch_snapshot, ranges));
    /* a field of another structure, or of none, is unknown to this one */
    assert_int_equal(coop_abi_offset("coop_torch_range", "device"), SIZE_MAX);
    assert_int_equal(coop_abi_offset("coop_torch_range", "length"), SIZE_MAX);
    assert_int_equal(coop_abi_offset("coop_torch_range", ""), SIZE_MAX);
    assert_int_equal(coop_abi_offset("coop_torch_range", "size "), SIZE_MAX);
    assert_int_equal(coop_abi_offset("coop_pool", "size"), SIZE_MAX); /* opaque */
    assert_int_equal(coop_abi_offset("", "size"), SIZE_MAX);
    assert_int_equal(coop_abi_offset(NULL, "size"), SIZE_MAX);
    assert_int_equal(coop_abi_offset("coop_torch_range", NULL), SIZE_MAX);
    assert_int_equal(coop_abi_offset(NULL, NULL), SIZE_MAX);
}

/* The message keeps 1023 characters of a longer one; clearing empties it. */
static void test_last_error(void **state)
{
    (void)state;
    char long_text[2000];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    assert_int_equal(coop_set_error(COOP_ERR_INVALID, "%s", long_text), COOP_ERR_INVALID);
    assert_int_equal(strlen(coop_last_error()), 1023);
    assert_int_equal(coop_set_error(COOP_ERR_BUSY, "pool %d is busy", 3), COOP_ERR_BUSY);
    assert_string_equal(coop_last_error(), "pool 3 is busy");
    coop_clear_error();
    assert_string_equal(coop_last_error(), "");
}

/* A message cut to fit ends between UTF-8 characters, not inside one: the
 * thread's message (a 2-byte character across its byte 1023) and a smaller
 * buffer of coop_format_message, with 2-, 3- and 4-byte characters cut at
 * every byte. */
static void test_message_cut_between_characters(void **state)
{
    (void)state;
    char text[1300];
    repeat_character(text, "\xc3\xa9", 600); /* the 512th spans bytes 1022 and 1023 */
    coop_set_error(COOP_ERR_INVALID, "%s", text);
    expect_valid_utf8("coop_set_error", coop_last_error());
    assert_int_equal(strlen(coop_last_error()), 2 * 511);
    assert_memory_equal(coop_last_error(), text, 2 * 511);
    static const char *const characters[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    for (size_t c = 0; c < 3; c++) {
        repeat_character(text, characters[c], 10);
        for (size_t cap = 1; cap < 16; cap++) {
            char buf[16];
            assert_int_equal(coop_format_message(buf, cap, "[%s]", text), (int)strlen(text) + 2);
            expect_valid_utf8("coop_format_message", buf);
            size_t whole = (cap - 2) / (c + 2) * (c + 2); /* bytes of whole characters after '[' */
            assert_int_equal(strlen(buf), cap == 1 ? 0 : 1 + whole);
        }
    }
    coop_clear_error();
}

/* coop_error_count counts the messages set; a kept message restored takes
 * back those set since (a failure dealt with is not counted), and a copy of
 * the message is cut between characters, as the message itself. */
static void test_error_count_and_copy(void **state)
{
    (void)state;
    uint64_t n = coop_error_count();
    assert_int_equal(coop_set_error(COOP_ERR_INVALID, "first \xc3\xa9"), COOP_ERR_INVALID);
    assert_true(coop_error_count() == n + 1);
    coop_error_kept kept;
    coop_error_keep(&kept);
    coop_set_error(COOP_ERR_BACKEND, "dealt with");
    coop_set_error(COOP_ERR_BACKEND, "and again");
    assert_true(coop_error_count() == n + 3);
    coop_error_restore(&kept);
    assert_true(coop_error_count() == n + 1);
    assert_string_equal(coop_last_error(), "first \xc3\xa9");
    char buf[8]; /* room for "first " and one byte of the two-byte 'e' */
    coop_copy_last_error(buf, sizeof buf);
    assert_string_equal(buf, "first ");
}

/* coop_error_in puts the call's name before the message once: not again
 * when the message begins with it (followed by ':' or '(', as "coop_free(PTR)"), before any
 * other message, a longer name or another name of its length included;
 * an empty message becomes coop_strerror's words; the message is not
 * counted as a new one. */
static void test_error_in_names_the_call_once(void **state)
{
    (void)state;
    char want[256];
    coop_clear_error();
    uint64_t n = coop_error_count();
    assert_int_equal(coop_error_in("coop_f", COOP_ERR_NOMEM), COOP_ERR_NOMEM);
    snprintf(want, sizeof want, "coop_f: %s", coop_strerror(COOP_ERR_NOMEM));
    assert_string_equal(coop_last_error(), want);
    assert_true(coop_error_count() == n);
    static const char *const named[] = {"coop_f: bad", "coop_f(0x10): bad"};
    for (size_t i = 0; i < 2; i++) {
        coop_set_error(COOP_ERR_INVALID, "%s", named[i]);
        assert_int_equal(coop_error_in("coop_f", COOP_ERR_INVALID), COOP_ERR_INVALID);
        assert_string_equal(coop_last_error(), named[i]);
    }
    static const char *const other[] = {"coop_fx: bad", "driver: bad", "driver(x): bad"};
    for (size_t i = 0; i < 3; i++) {
        coop_set_error(COOP_ERR_BACKEND, "%s", other[i]);
        coop_error_in("coop_f", COOP_ERR_BACKEND);
        snprintf(want, sizeof want, "coop_f: %s", other[i]);
        assert_string_equal(coop_last_error(), want);
    }
    /* a success passes through untouched: calls return their status by it */
    coop_set_error(COOP_ERR_INVALID, "driver: earlier");
    assert_int_equal(coop_error_in("coop_f", COOP_OK), COOP_OK);
    assert_string_equal(coop_last_error(), "driver: earlier");
    coop_clear_error();
}

static void *set_in_thread(void *arg)
{
    (void)arg;
    coop_set_error_message("from another thread");
    return (void *)(uintptr_t)(strcmp(coop_last_error(), "from another thread") == 0);
}

/* Each thread has its own message. */
static void test_last_error_per_thread(void **state)
{
    (void)state;
    coop_set_error_message("from this thread");
    pthread_t t;
    void *seen = NULL;
    assert_int_equal(pthread_create(&t, NULL, set_in_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &seen), 0);
    assert_true(seen != NULL);
    assert_string_equal(coop_last_error(), "from this thread");
    coop_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_abi_size),
        cmocka_unit_test(test_abi_offset),
        cmocka_unit_test(test_last_error),
        cmocka_unit_test(test_last_error_per_thread),
        cmocka_unit_test(test_message_cut_between_characters),
        cmocka_unit_test(test_error_count_and_copy),
        cmocka_unit_test(test_error_in_names_the_call_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
