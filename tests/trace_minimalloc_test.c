/*
 * The minimalloc CSV reader: replay order (time, frees first, then id),
 * every kind of bad row with its line number, and truncation.
 */
#include "trace_fixture.h"

static coop_status read_csv(const char *text, int gzip, trace *t)
{
    char path[300];
    fixture_path(path, sizeof path, gzip ? "m.csv.gz" : "m.csv");
    fixture_write(path, text, strlen(text), gzip);
    return trace_read_minimalloc(path, t);
}

static void test_order(void **state)
{
    (void)state;
    /* id 7 ends at 10 where 1 and 3 start; 3 sorts before... by id: 1, 3 */
    const char *csv = "id,lower,upper,size\r\n"
                      "3,10,20,50\n"
                      "7,0,10,100\n"
                      " 1 , 10 , 30 , 30 \n"
                      "\n"
                      "2,0,10,8\n";
    for (int gzip = 0; gzip <= 1; gzip++) {
        trace t;
        assert_int_equal(read_csv(csv, gzip, &t), COOP_OK);
        fixture_check_invariants(&t);
        assert_int_equal(t.num_events, 8);
        assert_int_equal(t.num_ids, 4);
        assert_int_equal(t.num_live_at_start, 0);
        /* expected (kind, size, time): t=0 A2 A7; t=10 F2 F7 A1 A3; t=20 F3; t=30 F1 */
        static const struct {
            trace_event_kind kind;
            uint64_t size;
            int64_t time;
        } want[] = {{TRACE_ALLOC, 8, 0},   {TRACE_ALLOC, 100, 0}, {TRACE_FREE, 8, 10},
                    {TRACE_FREE, 100, 10}, {TRACE_ALLOC, 30, 10}, {TRACE_ALLOC, 50, 10},
                    {TRACE_FREE, 50, 20},  {TRACE_FREE, 30, 30}};
        for (size_t i = 0; i < 8; i++) {
            assert_int_equal(t.events[i].kind, want[i].kind);
            assert_int_equal(t.events[i].size, want[i].size);
            assert_int_equal(t.events[i].time_us, want[i].time);
            assert_int_equal(t.events[i].stream, 0);
        }
        trace_free(&t);
    }
    trace t;
    assert_int_equal(read_csv("id,lower,upper,size\n", 0, &t), COOP_OK);
    assert_int_equal(t.num_events, 0);
    trace_free(&t);
}

/* minimalloc's other headers (its reader's): columns in any order, under
 * their other names, `end` inclusive, names that are not numbers, and the
 * optional alignment / offset / empty gaps columns: the same trace as the
 * plain form. */
static void test_header_variants(void **state)
{
    (void)state;
    const char *plain = "id,lower,upper,size\n3,10,20,50\n7,0,10,100\n1,10,30,30\n";
    /* every optional column, empty gaps (one blank) */
    static const char every_column[] = "buffer_id,begin,upper,size,alignment,offset,gaps\n"
                                       "3,10,20,50,64,0,\n7,0,10,100,1,128, \n"
                                       "1,10,30,30,512,64,\n";
    const char *const variants[] = {
        "size,upper,lower,id\n50,20,10,3\n100,10,0,7\n30,30,10,1\n",
        "buffer,start,end,size\n3,10,19,50\n7,0,9,100\n1,10,29,30\n",
        every_column,
        /* blank lines before the header, as detection allows and after it
         * (were "unknown column ''" on line 1) */
        "\n \t\r\nid,lower,upper,size\n3,10,20,50\n7,0,10,100\n1,10,30,30\n",
    };
    trace want;
    assert_int_equal(read_csv(plain, 0, &want), COOP_OK);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        trace t;
        if (read_csv(variants[v], (int)(v % 2), &t) != COOP_OK)
            fail_msg("variant %zu refused: %s", v, coop_last_error());
        fixture_check_invariants(&t);
        assert_int_equal(t.num_events, want.num_events);
        for (size_t i = 0; i < want.num_events; i++) {
            assert_int_equal(t.events[i].kind, want.events[i].kind);
            assert_int_equal(t.events[i].size, want.events[i].size);
            assert_int_equal(t.events[i].time_us, want.events[i].time_us);
            assert_int_equal(t.events[i].id, want.events[i].id);
        }
        trace_free(&t);
    }
    trace_free(&want);
    /* names that are not numbers sort after numbers, then as text */
    trace t;
    assert_int_equal(read_csv("buffer,start,end,size\nb2,0,9,2\nb1,0,9,1\n5,0,9,5\n", 0, &t),
                     COOP_OK);
    assert_int_equal(t.events[0].size, 5);
    assert_int_equal(t.events[1].size, 1);
    assert_int_equal(t.events[2].size, 2);
    trace_free(&t);
}

typedef struct bad_csv {
    const char *text;
    const char *expect;
} bad_csv;

static void test_bad_rows(void **state)
{
    (void)state;
    static const bad_csv cases[] = {
        {"", ":1: empty file"},
        {"id,lower,upper\n", ":1: no size column"},
        {"lower,upper,size\n1,2,3\n", ":1: no id column"},
        {"id,lower,upper,size,color\n", ":1: unknown column 'color'"},
        {"\n\nid,lower,upper,size\n1,0,x,3\n", ":4: upper 'x' is not a number"},
        {"\n \n", ":3: empty file: no header"},
        {"id,lower,upper,size,begin\n", ":1: column 'begin' repeats column 2"},
        /* 17 columns: split_fields stops at its 16 slots */
        {"id,lower,upper,size,offset,a,b,c,d,e,f,g,h,i,j,k,l\n",
         ":1: header has more than 16 columns"},
        {"id,lower,upper,size\n1,2,3\n", ":2: 3 fields, expected 4"},
        {"id,lower,upper,size\n1\n", ":2: 1 field, expected 4"},
        {"id,lower,upper,size\n1,2,3,4,5\n", ":2: more than 4 fields"},
        {"id,lower,upper,size\n,2,3,4\n", ":2: id is empty"},
        {"id,lower,upper,size\n1,,3,4\n", ":2: lower '(empty)' is not a number"},
        {"id,lower,upper,size\n1,2,3,-4\n", ":2: size '-4' is negative"},
        {"id,lower,upper,size\n1,-0,3,4\n",
         ":2: lower '-0' is not an unsigned number (no sign allowed)"},
        {"id,lower,upper,size\n1,2,3,4.5\n", ":2: size '4.5' is not a number"},
        {"id,lower,upper,size\n1,2,99999999999999999999,4\n",
         ":2: upper '99999999999999999999' is out of range"},
        {"id,lower,upper,size\n1,5,5,4\n", ":2: upper 5 must be greater than lower 5"},
        {"id,lower,upper,size\n1,0,5,72057594037927936\n",
         ":2: size 72057594037927936 is too large (sizes must be below 2^56)"},
        {"id,lower,upper,size\n1,6,5,4\n", ":2: upper 5 must be greater than lower 6"},
        {"id,lower,upper,size\n1,0,5,4\n2,0,5,4\n01,0,5,4\n",
         ":4: id 1 repeated (first at line 2)"},
        {"buffer,start,end,size\nb1,0,5,4\nb1,0,5,4\n", ":3: id 'b1' repeated (first at line 2)"},
        {"buffer,start,end,size\nb1,6,5,4\n", ":2: end 5 must be at least lower 6"},
        {"buffer,start,end,size\nb1,0,18446744073709551615,4\n",
         ":2: end '18446744073709551615' is out of range"},
        {"id,lower,upper,size,gaps\n1,0,9,4,2-3\n", ":2: gaps '2-3' are not supported"},
        {"id,lower,upper,size,alignment\n1,0,9,4,x\n", ":2: alignment 'x' is not a number"},
        {"id,lower,upper,size,offset\n1,0,9,4,-1\n", ":2: offset '-1' is negative"},
        {"id,lower,upper,size\n1,0,5,4", ":2: the last line has no newline"},
        {"id,lower,upper,size\n1,0,5,4\n\x01\x02\x03\n", ":3: 1 field, expected 4"},
        {"id,lower,upper,size\ngarbage,\xff\xfe,1,2\n", ":2: lower '\xff\xfe' is not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trace t;
        coop_status st = read_csv(cases[i].text, (int)(i % 2), &t);
        if (st == COOP_OK)
            fail_msg("case %zu was accepted", i);
        if (!strstr(coop_last_error(), cases[i].expect))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, coop_last_error(), cases[i].expect);
        assert_null(t.events);
    }
}

/* Cut inside a row: an error; cut at a row end: a valid shorter CSV. */
static void test_truncated(void **state)
{
    (void)state;
    const char *csv = "id,lower,upper,size\n0,0,10,100\n1,5,20,4096\n2,10,15,1\n";
    size_t len = strlen(csv);
    for (size_t cut = 0; cut < len; cut++) {
        char path[300];
        fixture_path(path, sizeof path, "cut.csv");
        fixture_write(path, csv, cut, 0);
        trace t;
        coop_status st = trace_read_minimalloc(path, &t);
        if (cut == 0 || csv[cut - 1] != '\n') {
            if (st == COOP_OK)
                fail_msg("cut at %zu accepted", cut);
        } else {
            assert_int_equal(st, COOP_OK);
            fixture_check_invariants(&t);
            trace_free(&t);
        }
    }
}

/* Times are unsigned 64-bit but trace times signed: one above INT64_MAX is
 * kept as INT64_MAX, never a negative (unknown) time. */
static void test_times_above_int64_max(void **state)
{
    (void)state;
    trace t;
    assert_int_equal(read_csv("id,lower,upper,size\n1,5,18446744073709551615,8\n", 0, &t), COOP_OK);
    assert_int_equal(t.num_events, 2);
    assert_int_equal(t.events[0].time_us, 5);
    assert_true(t.events[1].time_us == INT64_MAX);
    trace_free(&t);
}

int main(void)
{
    fixture_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_header_variants),
        cmocka_unit_test(test_bad_rows),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_times_above_int64_max),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_cleanup();
    return failed;
}
