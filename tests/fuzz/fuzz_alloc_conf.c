/*
 * libFuzzer harness: the COOP_ALLOC_CONF parser. Any string is either
 * refused (COOP_ERR_INVALID, a message, the output untouched) or yields a
 * configuration that satisfies the documented constraints; a host-backend
 * configuration of modest capacity is then turned into a pool that must be
 * created (or refused with a message) and work for one allocation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"
#include "byte_size.h"
#include "torch/alloc_conf.h"

#define MiB (UINT64_C(1) << 20)

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "%s for \"%s\": %s\n", what, text, coop_last_error());
    abort();
}

static void check_accepted(const coop_alloc_conf *c, const char *text)
{
    if (c->page_size && (c->page_size < 512 || (c->page_size & (c->page_size - 1))))
        fail("page size not a power of two >= 512", text);
    if (c->min_split % 512)
        fail("min_split not a multiple of 512", text);
    if (c->fraction != 0 && !(c->fraction > 0 && c->fraction <= 1))
        fail("fraction outside (0, 1]", text);
    if (c->fraction != 0 && c->capacity)
        fail("capacity and fraction both set", text);
    if (c->placement != COOP_ALLOC_LOW && c->placement != COOP_ALLOC_HIGH)
        fail("bad placement", text);
    if (c->backend != COOP_BACKEND_HOST && c->backend != COOP_BACKEND_CUDA)
        fail("bad backend", text);
}

/* The normalized text (coop_torch_settings' spelling) parses back to
 * itself: a user may give it to COOP_ALLOC_CONF again. */
static void check_round_trip(const char *text)
{
    char once[512], twice[512];
    if (coop_torch_normalize_conf(text, once, sizeof once) != COOP_OK)
        fail("accepted by the parser, refused by coop_torch_normalize_conf", text);
    if (coop_torch_normalize_conf(once, twice, sizeof twice) != COOP_OK)
        fail("normalized text does not parse back", text);
    if (strcmp(once, twice) != 0)
        fail("normalized text normalizes to another text", text);
}

/* A host pool from the parsed settings: created or refused with a reason. */
static void try_pool(const coop_alloc_conf *c, const char *text)
{
    coop_config cfg;
    coop_alloc_conf_to_config(c, 0, &cfg);
    cfg.backend = COOP_BACKEND_HOST;
    cfg.check = true;
    if (cfg.capacity == 0 || cfg.capacity > 256 * MiB)
        cfg.capacity = 64 * MiB;
    coop_pool *pool = NULL;
    coop_status st = coop_pool_create(&cfg, &pool);
    if (st != COOP_OK) {
        if (pool || !coop_last_error()[0])
            fail("pool_create failed without a reason", text);
        return;
    }
    void *p = coop_malloc(pool, 4096, 0, c->placement, &st);
    if (!p && st != COOP_ERR_NOMEM)
        fail("malloc", text);
    if (p && coop_free(pool, p) != COOP_OK)
        fail("free", text);
    if (coop_empty_cache(pool) != COOP_OK || coop_pool_check(pool) != COOP_OK)
        fail("empty_cache / check", text);
    coop_pool_destroy(pool);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    char *text = malloc(len + 1);
    if (!text)
        return 0;
    memcpy(text, data, len);
    text[len] = '\0';
    coop_alloc_conf conf, before;
    memset(&conf, 0xa5, sizeof conf);
    before = conf;
    coop_status st = coop_alloc_conf_parse(text, &conf);
    if (st != COOP_OK) {
        if (st != COOP_ERR_INVALID || !coop_last_error()[0])
            fail("refusal without COOP_ERR_INVALID and a message", text);
        if (memcmp(&conf, &before, sizeof conf) != 0)
            fail("a refused string changed the output", text);
    } else {
        check_accepted(&conf, text);
        check_round_trip(text);
        try_pool(&conf, text);
    }
    uint64_t bytes;
    if (byte_size_parse(text, len, &bytes) && bytes == 0)
        fail("parse_bytes accepted zero", text);
    free(text);
    return 0;
}
