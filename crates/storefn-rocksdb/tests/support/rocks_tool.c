/* Test support: builds RocksDB databases with the real library and answers Gets through it, so
 * the reader's tests compare against RocksDB's own reads. Built by the tests with the system C
 * compiler (`cc rocks_tool.c -lrocksdb`).
 *
 *   rocks_tool build DIR SEED KEYS BLOCK_SIZE COMPRESSION(no|snappy|lz4|zstd) BLOOM_BITS [CHECKSUM]
 *       CHECKSUM: xxh3 (7.8's default) or crc32c
 *       several levels: two generations of puts, overwrites and deletes compacted over L1..L3
 *       with small level sizes, two L0 files that overlap, and puts/deletes left in the WAL only
 *       (the database is closed without a flush)
 *   rocks_tool load DIR KEYS VALUE_BYTES BLOCK_SIZE CHECKSUM
 *       db_bench's shape for benchmarks: KEYS keys (key%08d) put in random order with values of
 *       VALUE_BYTES, no compression, 10 bloom bits, leveled compaction (L0 and several levels),
 *       a last flush, RocksDB's compactions waited for, and 1% of the keys overwritten in the
 *       WAL only
 *   rocks_tool get DIR < keys        one key per line; prints "key\tvalue" or "key\t<absent>"
 *   rocks_tool put DIR KEY VALUE | delete DIR KEY | delrange DIR BEGIN END | flush DIR
 *       delrange: a range tombstone over [BEGIN, END), left in the WAL
 *   rocks_tool compact DIR          flush, then compact every level into one (files replaced)
 */
#include <rocksdb/c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(char *err, const char *what) {
    if (err) {
        fprintf(stderr, "rocks_tool: %s: %s\n", what, err);
        exit(2);
    }
}

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void key_of(uint64_t i, char *out) { sprintf(out, "key%08llu", (unsigned long long)i); }

/* Value sizes across a data block's cases: tiny, typical, and larger than a 4 KiB block. */
static size_t value_of(uint64_t i, int gen, char *out) {
    size_t len;
    switch (next() % 8) {
    case 0: len = 0; break;
    case 1: len = 5000 + next() % 3000; break;
    default: len = 10 + next() % 200; break;
    }
    int n = snprintf(out, 64, "v%d-%llu-", gen, (unsigned long long)i);
    for (size_t j = (size_t)n; j < len; j++) out[j] = (char)('a' + (i + j) % 26);
    return len < (size_t)n ? (size_t)n : len;
}

static int compression_of(const char *s) {
    if (!strcmp(s, "no")) return rocksdb_no_compression;
    if (!strcmp(s, "snappy")) return rocksdb_snappy_compression;
    if (!strcmp(s, "lz4")) return rocksdb_lz4_compression;
    if (!strcmp(s, "zstd")) return rocksdb_zstd_compression;
    fprintf(stderr, "rocks_tool: unknown compression %s\n", s);
    exit(2);
}

/* The block checksum type new tables get (rocksdb's ChecksumType: 1 crc32c, 4 xxh3). */
static char checksum_type = 4;

static rocksdb_options_t *options(int block_size, const char *compression, int bloom_bits) {
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_disable_auto_compactions(o, 1);
    rocksdb_options_set_write_buffer_size(o, 64 << 20);
    rocksdb_options_set_compression(o, compression_of(compression));
    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_size(t, (size_t)block_size);
    rocksdb_block_based_options_set_checksum(t, checksum_type);
    if (bloom_bits > 0)
        rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom_full(bloom_bits));
    rocksdb_options_set_block_based_table_factory(o, t);
    return o;
}

static void flush(rocksdb_t *db) {
    char *err = NULL;
    rocksdb_flushoptions_t *f = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(f, 1);
    rocksdb_flush(db, f, &err);
    check(err, "flush");
    rocksdb_flushoptions_destroy(f);
}

/* One generation: puts of fresh values for `share` percent of keys, deletes for `del` percent. */
static void generation(rocksdb_t *db, uint64_t keys, int gen, int share, int del) {
    static char val[8192];
    char key[32], *err = NULL;
    rocksdb_writeoptions_t *w = rocksdb_writeoptions_create();
    for (uint64_t i = 0; i < keys; i++) {
        uint64_t r = next() % 100;
        key_of(i, key);
        if (r < (uint64_t)del) {
            rocksdb_delete(db, w, key, strlen(key), &err);
        } else if (r < (uint64_t)(del + share)) {
            size_t n = value_of(i, gen, val);
            rocksdb_put(db, w, key, strlen(key), val, n, &err);
        }
        check(err, "write");
    }
    rocksdb_writeoptions_destroy(w);
}

/* Leveled compaction with small levels, so a few MB of data spread over L1..L3 on their own. */
static rocksdb_t *open_small_levels(rocksdb_options_t *o, const char *dir) {
    char *err = NULL;
    rocksdb_options_set_disable_auto_compactions(o, 0);
    rocksdb_options_set_write_buffer_size(o, 256 << 10);
    rocksdb_options_set_target_file_size_base(o, 256 << 10);
    rocksdb_options_set_max_bytes_for_level_base(o, 1 << 20);
    rocksdb_options_set_level0_file_num_compaction_trigger(o, 2);
    rocksdb_t *db = rocksdb_open(o, dir, &err);
    check(err, "open");
    return db;
}

static int build(char **argv) {
    const char *dir = argv[2];
    rng = strtoull(argv[3], NULL, 10) * 2654435761u + 1;
    uint64_t keys = strtoull(argv[4], NULL, 10);
    char *err = NULL;
    rocksdb_t *db = open_small_levels(options(atoi(argv[5]), argv[6], atoi(argv[7])), dir);
    generation(db, keys, 1, 100, 0);
    generation(db, keys, 2, 40, 10);
    flush(db);
    rocksdb_cancel_all_background_work(db, 1);
    rocksdb_close(db);
    /* No compaction from here on: L0 files stay where the flushes put them. */
    db = rocksdb_open(options(atoi(argv[5]), argv[6], atoi(argv[7])), dir, &err);
    check(err, "reopen");
    generation(db, keys, 3, 10, 5);
    flush(db);
    generation(db, keys, 4, 10, 5);
    flush(db); /* two L0 files over the same key range */
    generation(db, keys, 5, 3, 2); /* in the WAL only: closed without a flush */
    rocksdb_close(db);
    return 0;
}

/* Waits until RocksDB's own compactions are done: the levels' shape is the one RocksDB keeps
 * (level 0 under its compaction trigger), not whatever the load left when it stopped. */
static void settle(rocksdb_t *db) {
    for (int i = 0; i < 36000; i++) {
        char *pending = rocksdb_property_value(db, "rocksdb.compaction-pending");
        char *running = rocksdb_property_value(db, "rocksdb.num-running-compactions");
        int busy = !pending || !running || strcmp(pending, "0") || strcmp(running, "0");
        rocksdb_free(pending);
        rocksdb_free(running);
        if (!busy) return;
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    fprintf(stderr, "rocks_tool: compactions still running after an hour\n");
    exit(2);
}

static int load(char **argv) {
    const char *dir = argv[2];
    uint64_t keys = strtoull(argv[3], NULL, 10);
    size_t vbytes = strtoull(argv[4], NULL, 10);
    if (!strcmp(argv[6], "crc32c")) checksum_type = 1;
    rocksdb_options_t *o = options(atoi(argv[5]), "no", 10);
    rocksdb_options_set_disable_auto_compactions(o, 0);
    rocksdb_options_set_write_buffer_size(o, 4 << 20);
    /* Tables cut at 10 MiB (not up to twice that, 7.8's dynamic file size): a 4 KiB-block
     * table's index block (~1/180 of it) stays within one 64 KiB hop, and a 555 MB database
     * stays under the 64 files a chain engine keeps open. */
    rocksdb_options_set_target_file_size_base(o, 10 << 20);
    rocksdb_options_set_max_bytes_for_level_base(o, 16 << 20);
    char *err = NULL, key[32], *val = malloc(vbytes + 1);
    rocksdb_options_t *fixed = rocksdb_options_create();
    rocksdb_get_options_from_string(o, "level_compaction_dynamic_file_size=false", fixed, &err);
    check(err, "options");
    rocksdb_options_destroy(o);
    o = fixed;
    rocksdb_t *db = rocksdb_open(o, dir, &err);
    check(err, "open");
    rocksdb_writeoptions_t *w = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(w, 1);
    rng = 88172645463325252ull;
    /* A permutation of 0..keys: i * a + b mod keys with a odd and coprime enough here. */
    uint64_t a = 2654435761u % keys | 1;
    while (keys % a == 0 || (keys % 2 == 0 && a % 2 == 0)) a += 2;
    for (uint64_t n = 0; n < keys; n++) {
        uint64_t i = (n * a + 12345) % keys;
        key_of(i, key);
        for (size_t j = 0; j < vbytes; j++) val[j] = (char)('a' + (i + j) % 26);
        char pre[32];
        int np = snprintf(pre, sizeof pre, "v-%llu-", (unsigned long long)i);
        memcpy(val, pre, (size_t)np < vbytes ? (size_t)np : vbytes);
        rocksdb_put(db, w, key, strlen(key), val, vbytes, &err);
        check(err, "put");
    }
    flush(db);
    settle(db);
    rocksdb_writeoptions_disable_WAL(w, 0);
    for (uint64_t i = 0; i < keys; i += 100) {
        key_of(i, key);
        rocksdb_put(db, w, key, strlen(key), "wal", 3, &err);
        check(err, "put");
    }
    rocksdb_cancel_all_background_work(db, 1);
    rocksdb_close(db);
    free(val);
    return 0;
}

static int get(char **argv) {
    rocksdb_options_t *o = rocksdb_options_create();
    char *err = NULL, line[4096];
    rocksdb_t *db = rocksdb_open_for_read_only(o, argv[2], 0, &err);
    check(err, "open read-only");
    rocksdb_readoptions_t *r = rocksdb_readoptions_create();
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strcspn(line, "\n");
        line[n] = 0;
        size_t vlen;
        char *v = rocksdb_get(db, r, line, n, &vlen, &err);
        check(err, "get");
        if (v) {
            printf("%s\t%.*s\n", line, (int)vlen, v);
            rocksdb_free(v);
        } else {
            printf("%s\t<absent>\n", line);
        }
    }
    rocksdb_close(db);
    return 0;
}

static int single(char **argv, int argc) {
    rocksdb_options_t *o = options(4096, "no", 10);
    char *err = NULL;
    rocksdb_t *db = rocksdb_open(o, argv[2], &err);
    check(err, "open");
    rocksdb_writeoptions_t *w = rocksdb_writeoptions_create();
    if (!strcmp(argv[1], "put") && argc == 5)
        rocksdb_put(db, w, argv[3], strlen(argv[3]), argv[4], strlen(argv[4]), &err);
    else if (!strcmp(argv[1], "delete") && argc == 4)
        rocksdb_delete(db, w, argv[3], strlen(argv[3]), &err);
    else if (!strcmp(argv[1], "delrange") && argc == 5) {
        rocksdb_writebatch_t *b = rocksdb_writebatch_create();
        rocksdb_writebatch_delete_range(b, argv[3], strlen(argv[3]), argv[4], strlen(argv[4]));
        rocksdb_write(db, w, b, &err);
        rocksdb_writebatch_destroy(b);
    }
    else if (!strcmp(argv[1], "flush"))
        flush(db);
    else if (!strcmp(argv[1], "compact")) {
        flush(db);
        rocksdb_compact_range(db, NULL, 0, NULL, 0);
    }
    else {
        fprintf(stderr, "rocks_tool: bad arguments\n");
        return 2;
    }
    check(err, argv[1]);
    rocksdb_close(db);
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 8 || argc == 9) && !strcmp(argv[1], "build")) {
        if (argc == 9) {
            if (!strcmp(argv[8], "crc32c")) checksum_type = 1;
            else if (strcmp(argv[8], "xxh3")) { fprintf(stderr, "rocks_tool: checksum %s\n", argv[8]); return 2; }
        }
        return build(argv);
    }
    if (argc == 3 && !strcmp(argv[1], "get")) return get(argv);
    if (argc == 7 && !strcmp(argv[1], "load")) return load(argv);
    if (argc >= 3) return single(argv, argc);
    fprintf(stderr, "usage: see the comment at the top of rocks_tool.c\n");
    return 2;
}
