// Block pool, prefix cache and KV manager: reference counts, the LRU free
// queue, cached-prefix hits, the SHA-256 hash chain and out-of-memory paths.
#include <stdlib.h>

#include "check.h"
#include "core/alloc.h"
#include "engine/block_pool.h"
#include "engine/kv_manager.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"

static struct block_hash hash_of(int v)
{
    struct block_hash h = {{0}};
    int32_t t = v;
    block_hash_compute(NULL, &t, 1, NULL, 0, &h);
    return h;
}

static void hex_of(const struct block_hash *h, char *out)
{
    for (int i = 0; i < BLOCK_HASH_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", h->bytes[i]);
}

static void test_refcounts(void)
{
    struct block_pool *bp;
    CHECK_EQ_INT(block_pool_create(4, true, &bp), VLLMC_OK);
    int32_t ids[4];
    CHECK(block_pool_alloc(bp, 2, ids));
    CHECK_EQ_INT(ids[0], 0);
    CHECK_EQ_INT(ids[1], 1);
    CHECK_EQ_INT(bp->n_free, 2);
    CHECK_NEAR(block_pool_usage(bp), 0.5, 1e-12, 0);
    block_pool_touch(bp, ids, 1);
    CHECK_EQ_INT(bp->blocks[0].ref_cnt, 2);
    block_pool_release(bp, ids, 1);
    CHECK_EQ_INT(bp->blocks[0].ref_cnt, 1);
    CHECK_EQ_INT(bp->n_free, 2);
    // Asking for more than is free takes nothing.
    int32_t more[3] = {-1, -1, -1};
    CHECK(!block_pool_alloc(bp, 3, more));
    CHECK_EQ_INT(more[0], -1);
    CHECK_EQ_INT(bp->n_free, 2);
    block_pool_release(bp, ids, 2);
    CHECK_EQ_INT(bp->n_free, 4);
    // Freed blocks join the tail: 2, 3 come out before 0, 1.
    CHECK(block_pool_alloc(bp, 4, ids));
    CHECK_EQ_INT(ids[0], 2);
    CHECK_EQ_INT(ids[1], 3);
    CHECK_EQ_INT(ids[2], 0);
    CHECK_EQ_INT(ids[3], 1);
    block_pool_free(bp);
}

static void test_lru_eviction(void)
{
    struct block_pool *bp;
    CHECK_EQ_INT(block_pool_create(4, true, &bp), VLLMC_OK);
    int32_t ids[4];
    CHECK(block_pool_alloc(bp, 3, ids)); // 0, 1, 2: one request's blocks
    struct block_hash h0 = hash_of(100), h1 = hash_of(101);
    block_pool_cache(bp, ids[0], &h0);
    block_pool_cache(bp, ids[1], &h1);
    CHECK_EQ_INT(bp->n_cached, 2);
    // The request ends: its blocks go back last first, and stay cached.
    int32_t rev[3] = {ids[2], ids[1], ids[0]};
    block_pool_release(bp, rev, 3);
    CHECK_EQ_INT(block_pool_lookup(bp, &h0), 0);
    CHECK_EQ_INT(block_pool_lookup(bp, &h1), 1);
    // Free queue now: 3, 2, 1, 0. Two allocations take the uncached 3 and 2.
    int32_t got[2];
    CHECK(block_pool_alloc(bp, 2, got));
    CHECK_EQ_INT(got[0], 3);
    CHECK_EQ_INT(got[1], 2);
    CHECK_EQ_INT(bp->n_cached, 2);
    // The next one evicts the request's tail block (1) before its head (0).
    int32_t one;
    CHECK(block_pool_alloc(bp, 1, &one));
    CHECK_EQ_INT(one, 1);
    CHECK_EQ_INT(block_pool_lookup(bp, &h1), -1);
    CHECK_EQ_INT(block_pool_lookup(bp, &h0), 0);
    CHECK_EQ_INT(bp->n_evictions, 1);
    // Touching a free cached block takes it out of the free queue.
    int32_t zero = 0;
    block_pool_touch(bp, &zero, 1);
    CHECK_EQ_INT(bp->n_free, 0);
    CHECK(!block_pool_alloc(bp, 1, &one));
    block_pool_free(bp);
}

static void test_hash_chain(void)
{
    // Expected digests: Python hashlib.sha256 over the documented layout
    // (parent, le32 n_tokens, le32 tokens, le32 n_extra, extra).
    int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8};
    struct block_hash a, b, c, d;
    char hex[2 * BLOCK_HASH_BYTES + 1];
    block_hash_compute(NULL, t1, 4, NULL, 0, &a);
    hex_of(&a, hex);
    CHECK_EQ_STR(hex, "b6a0deb1ace9ed267aa2566a00dfba012a0a0a7f18282decea003718d8b9b040");
    block_hash_compute(&a, t2, 4, NULL, 0, &b);
    hex_of(&b, hex);
    CHECK_EQ_STR(hex, "e91923497ca444987ceb36d7994cee01c50fa7d4fd963c418c845709a121dfc1");
    block_hash_compute(NULL, t1, 4, "salt", 4, &c);
    hex_of(&c, hex);
    CHECK_EQ_STR(hex, "bc848b2f161c3fce6c79da9da99cd4f4cd811911d9b28c679dc18cf2ae6d90f2");
    // The same block under another parent hashes differently.
    block_hash_compute(&c, t2, 4, NULL, 0, &d);
    CHECK(memcmp(d.bytes, b.bytes, BLOCK_HASH_BYTES) != 0);

    // A request hashes its full blocks along the same chain, salt on block 0.
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    int32_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    struct request *req, *salted;
    CHECK_EQ_INT(request_create(prompt, 9, &sp, NULL, 64, 4, &req), VLLMC_OK);
    CHECK_EQ_INT(request_create(prompt, 9, &sp, "salt", 64, 4, &salted), VLLMC_OK);
    CHECK_EQ_INT(req->n_block_hashes, 2);
    CHECK(!memcmp(req->block_hashes[0].bytes, a.bytes, BLOCK_HASH_BYTES));
    CHECK(!memcmp(req->block_hashes[1].bytes, b.bytes, BLOCK_HASH_BYTES));
    CHECK(!memcmp(salted->block_hashes[0].bytes, c.bytes, BLOCK_HASH_BYTES));
    CHECK(!memcmp(salted->block_hashes[1].bytes, d.bytes, BLOCK_HASH_BYTES));
    // Generated tokens complete the next block.
    for (int32_t t = 10; t <= 12; t++)
        request_append_token(req, t);
    CHECK_EQ_INT(req->n_block_hashes, 3);
    request_free(req);
    request_free(salted);
}

static struct request *make_request(const int32_t *prompt, int n, const char *salt)
{
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    struct request *req = NULL;
    CHECK_EQ_INT(request_create(prompt, n, &sp, salt, 64, 4, &req), VLLMC_OK);
    return req;
}

static void test_prefix_hits(void)
{
    struct kv_manager *km;
    CHECK_EQ_INT(kv_manager_create(8, 4, 64, true, &km), VLLMC_OK);
    int32_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t hits[16];
    struct request *a = make_request(prompt, 9, NULL);
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, a, hits), 0);
    CHECK(kv_manager_allocate_slots(km, a, 9, hits, 0));
    CHECK_EQ_INT(a->n_blocks, 3);
    CHECK_EQ_INT(km->pool->n_cached, 2); // the two full blocks
    a->n_computed_tokens = 9;

    // A second request with the same prompt shares the two full blocks.
    struct request *b = make_request(prompt, 9, NULL);
    int n_hit = kv_manager_get_computed_blocks(km, b, hits);
    CHECK_EQ_INT(n_hit, 2);
    CHECK_EQ_INT(hits[0], a->block_ids[0]);
    CHECK_EQ_INT(hits[1], a->block_ids[1]);
    CHECK(kv_manager_allocate_slots(km, b, 1, hits, n_hit));
    kv_manager_record_lookup(km, b, n_hit);
    CHECK_EQ_INT(km->pool->blocks[a->block_ids[0]].ref_cnt, 2);
    CHECK_EQ_INT(b->n_blocks, 3);
    CHECK(b->block_ids[2] != a->block_ids[2]);
    CHECK_EQ_INT(km->stats.n_query_tokens, 9);
    CHECK_EQ_INT(km->stats.n_hit_tokens, 8);
    b->n_computed_tokens = 9;

    // A prompt of exactly two blocks may reuse only one: its last token is
    // always computed to get logits.
    struct request *c = make_request(prompt, 8, NULL);
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, c, hits), 1);
    // Another cache salt shares nothing.
    struct request *d = make_request(prompt, 9, "tenant-2");
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, d, hits), 0);
    // A request with prompt logprobs skips the cache.
    struct request *e = make_request(prompt, 9, NULL);
    e->skip_prefix_cache = true;
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, e, hits), 0);

    // Freeing both keeps the shared blocks cached, and a third request hits
    // them although nobody holds them.
    kv_manager_free_request(km, a);
    CHECK_EQ_INT(km->pool->blocks[b->block_ids[0]].ref_cnt, 1);
    kv_manager_free_request(km, b);
    CHECK_EQ_INT(km->pool->n_free, 8);
    struct request *f = make_request(prompt, 9, NULL);
    n_hit = kv_manager_get_computed_blocks(km, f, hits);
    CHECK_EQ_INT(n_hit, 2);
    // Reusing free cached blocks costs free blocks: 2 hits + 1 new of 8.
    CHECK(kv_manager_allocate_slots(km, f, 1, hits, n_hit));
    CHECK_EQ_INT(km->pool->n_free, 5);
    kv_manager_free_request(km, f);
    request_free(a);
    request_free(b);
    request_free(c);
    request_free(d);
    request_free(e);
    request_free(f);
    kv_manager_free(km);
}

static void test_no_caching(void)
{
    struct kv_manager *km;
    CHECK_EQ_INT(kv_manager_create(8, 4, 64, false, &km), VLLMC_OK);
    int32_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t hits[16];
    struct request *a = make_request(prompt, 9, NULL);
    CHECK(kv_manager_allocate_slots(km, a, 9, hits, 0));
    a->n_computed_tokens = 9;
    CHECK_EQ_INT(km->pool->n_cached, 0);
    kv_manager_free_request(km, a);
    struct request *b = make_request(prompt, 9, NULL);
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, b, hits), 0);
    request_free(a);
    request_free(b);
    kv_manager_free(km);
}

static void test_uncomputed_blocks_forgotten(void)
{
    // A request preempted before its step runs has offered blocks whose KV was
    // never written: they must not be hit afterwards.
    struct kv_manager *km;
    CHECK_EQ_INT(kv_manager_create(8, 4, 64, true, &km), VLLMC_OK);
    int32_t prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t hits[16];
    struct request *a = make_request(prompt, 9, NULL);
    CHECK(kv_manager_allocate_slots(km, a, 4, hits, 0)); // first chunk: block 0
    a->n_computed_tokens = 4;                            // the step ran
    CHECK(kv_manager_allocate_slots(km, a, 5, hits, 0)); // second chunk offers block 1
    CHECK_EQ_INT(km->pool->n_cached, 2);
    kv_manager_free_request(km, a); // preempted before the second step ran
    CHECK_EQ_INT(km->pool->n_cached, 1);
    struct request *b = make_request(prompt, 9, NULL);
    CHECK_EQ_INT(kv_manager_get_computed_blocks(km, b, hits), 1);
    request_free(a);
    request_free(b);
    kv_manager_free(km);
}

static void test_map_stress(void)
{
    // Random caching, eviction and lookups against a plain array model.
    enum { N = 256 };
    struct block_pool *bp;
    CHECK_EQ_INT(block_pool_create(N, true, &bp), VLLMC_OK);
    int32_t ids[N];
    CHECK(block_pool_alloc(bp, N, ids));
    int key_of[N]; // cached key per block, -1 = none
    for (int i = 0; i < N; i++)
        key_of[i] = -1;
    unsigned s = 12345;
    int bad = 0;
    for (int step = 0; step < 20000; step++) {
        s = s * 1103515245u + 12345u;
        int blk = (int)((s >> 8) % N);
        int key = (int)((s >> 20) % 512);
        if (key_of[blk] >= 0) {
            block_pool_uncache(bp, blk);
            key_of[blk] = -1;
        } else {
            bool taken = false;
            for (int i = 0; i < N; i++)
                taken |= key_of[i] == key;
            struct block_hash h = hash_of(key);
            block_pool_cache(bp, blk, &h);
            if (!taken)
                key_of[blk] = key;
        }
        int probe = (int)((s >> 4) % 512);
        struct block_hash hp = hash_of(probe);
        int32_t want = -1;
        for (int i = 0; i < N; i++)
            if (key_of[i] == probe)
                want = i;
        bad += block_pool_lookup(bp, &hp) != want;
    }
    CHECK_EQ_INT(bad, 0);
    block_pool_free(bp);
}

static void test_oom(void)
{
    int n_fail = 0;
    for (long n = 1;; n++) {
        struct block_pool *bp = NULL;
        mem_fail_after(n);
        enum vllmc_status rc = block_pool_create(16, true, &bp);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            block_pool_free(bp);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(bp == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 3);
    n_fail = 0;
    for (long n = 1;; n++) {
        struct kv_manager *km = NULL;
        mem_fail_after(n);
        enum vllmc_status rc = kv_manager_create(16, 4, 64, true, &km);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            kv_manager_free(km);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(km == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 4);
    n_fail = 0;
    struct vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    const char *stops[2] = {"a", "bc"};
    int32_t stop_ids[1] = {3};
    struct vllmc_logit_bias lb[1] = {{1, 2.0f}};
    sp.stop = stops;
    sp.n_stop = 2;
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = 1;
    sp.logit_bias = lb;
    sp.n_logit_bias = 1;
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    for (long n = 1;; n++) {
        struct request *req = NULL;
        mem_fail_after(n);
        enum vllmc_status rc = request_create(prompt, 5, &sp, "salt", 64, 4, &req);
        mem_fail_after(0);
        if (rc == VLLMC_OK) {
            CHECK_EQ_STR(req->sp.stop[1], "bc");
            request_free(req);
            break;
        }
        CHECK_EQ_INT(rc, VLLMC_ERR_NOMEM);
        CHECK(req == NULL);
        n_fail++;
    }
    CHECK(n_fail >= 9);
}

int main(int argc, char **argv)
{
    static const struct check_case cases[] = {
        {"refcounts", test_refcounts},
        {"lru_eviction", test_lru_eviction},
        {"hash_chain", test_hash_chain},
        {"prefix_hits", test_prefix_hits},
        {"no_caching", test_no_caching},
        {"uncomputed_blocks_forgotten", test_uncomputed_blocks_forgotten},
        {"map_stress", test_map_stress},
        {"oom", test_oom},
        {NULL, NULL},
    };
    return check_run(cases, argc, argv);
}
