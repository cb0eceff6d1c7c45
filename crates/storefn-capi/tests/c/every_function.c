/* Every function of storefn.h, success and error paths, run under AddressSanitizer by
 * tests/asan.rs. Arguments: DB XRP_PROG LAMBDA_PROG REFUSED_PROG DATA OUT_FILE ADDR TOKEN
 * DEAD_ADDR. Halfway it prints "STOP" and waits for a line on stdin: the test stops the server
 * in between, so the last calls meet a server that is gone. Prints "ALL OK" at the end.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storefn.h"

static int checks;

#define EXPECT(call, want)                                                                   \
	do {                                                                                 \
		storefn_status got_ = (call);                                                \
		checks++;                                                                    \
		if (got_ != (want)) {                                                        \
			fprintf(stderr, "line %d: %s gave %s, want %s; last error: %s\n",    \
				__LINE__, #call, storefn_status_name((int32_t)got_),         \
				storefn_status_name((int32_t)(want)), storefn_last_error()); \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		checks++;                                                                    \
		if (!(cond)) {                                                               \
			fprintf(stderr, "line %d: %s is false; last error: %s\n", __LINE__,  \
				#cond, storefn_last_error());                                \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

#define ERR_HAS(text) CHECK(strstr(storefn_last_error(), (text)) != NULL)

struct maybe_value {
	uint8_t found;
	uint8_t value[64];
};
struct sg_query {
	uint64_t root_pointer, value_ptr;
	uint32_t state_flags;
	int32_t current_index, n_keys;
	uint32_t pad;
	uint64_t keys[32];
	struct maybe_value values[32];
};

static void query(struct sg_query *q, uint64_t key)
{
	memset(q, 0, sizeof *q);
	q->n_keys = 1;
	q->keys[0] = key;
}

static int value_is(const uint8_t *v, uint64_t key)
{
	char want[64];
	snprintf(want, sizeof want, "%63" PRIu64, key);
	return memcmp(v, want, 64) == 0;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(*len);
	CHECK(fread(b, 1, *len, f) == *len);
	fclose(f);
	return b;
}

static void programs(const char *xrp, const char *refused, storefn_prog **x, storefn_prog **l,
		     const char *lambda)
{
	storefn_prog *p = NULL;
	const uint8_t junk[] = "not an ELF object";
	EXPECT(storefn_prog_load(junk, sizeof junk, NULL, STOREFN_PROG_TYPE_XRP, &p), STOREFN_STATUS_LOAD);
	CHECK(p == NULL && strlen(storefn_last_error()) > 0);
	EXPECT(storefn_prog_load(NULL, 10, NULL, STOREFN_PROG_TYPE_XRP, &p), STOREFN_STATUS_ARG);
	ERR_HAS("elf is NULL");
	EXPECT(storefn_prog_load_path("/nonexistent/prog.o", NULL, STOREFN_PROG_TYPE_XRP, &p), STOREFN_STATUS_IO);
	ERR_HAS("/nonexistent/prog.o");
	EXPECT(storefn_prog_load_path(refused, NULL, STOREFN_PROG_TYPE_XRP, &p), STOREFN_STATUS_VERIFY);
	ERR_HAS("verifier");
	EXPECT(storefn_prog_load_path(xrp, NULL, 7, &p), STOREFN_STATUS_ARG);
	EXPECT(storefn_prog_load_path(xrp, "no_such_section", STOREFN_PROG_TYPE_XRP, &p), STOREFN_STATUS_LOAD);
	EXPECT(storefn_prog_load_path(xrp, NULL, STOREFN_PROG_TYPE_XRP, NULL), STOREFN_STATUS_ARG);

	size_t len = 0;
	uint8_t *elf = slurp(xrp, &len);
	EXPECT(storefn_prog_load(elf, len, NULL, STOREFN_PROG_TYPE_XRP, x), STOREFN_STATUS_OK);
	free(elf); /* the program keeps its own copy */
	storefn_prog_type t = STOREFN_PROG_TYPE_LAMBDA;
	EXPECT(storefn_prog_get_type(*x, &t), STOREFN_STATUS_OK);
	CHECK(t == STOREFN_PROG_TYPE_XRP);
	size_t insns = 0;
	EXPECT(storefn_prog_insns(*x, &insns), STOREFN_STATUS_OK);
	CHECK(insns > 10);
	EXPECT(storefn_prog_get_type(NULL, &t), STOREFN_STATUS_ARG);
	EXPECT(storefn_prog_load_path(lambda, NULL, STOREFN_PROG_TYPE_LAMBDA, l), STOREFN_STATUS_OK);
	storefn_prog_free(NULL);
}

static void sync_reads(storefn_engine *e, const char *db, storefn_prog *x, storefn_prog *l)
{
	int fd = open(db, O_RDONLY);
	CHECK(fd >= 0);
	struct sg_query q;
	uint8_t buf[512];
	uint32_t hops = 0;
	memset(buf, 0, sizeof buf);
	query(&q, 123);
	EXPECT(storefn_read_xrp(e, fd, buf, sizeof buf, 0, x, (uint8_t *)&q, sizeof q, &hops), STOREFN_STATUS_OK);
	CHECK(q.values[0].found == 1 && value_is(q.values[0].value, 123));
	CHECK(hops == 3); /* root, leaf, value block */
	CHECK(buf[511] != 0 || buf[0] != 0); /* the last block (the value's) landed in buf */
	query(&q, 5000);
	EXPECT(storefn_read_xrp(e, fd, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_OK);
	CHECK(q.values[0].found == 0);

	static uint8_t big[5000];
	EXPECT(storefn_read_xrp(e, fd, NULL, 512, 0, x, big, sizeof big, NULL), STOREFN_STATUS_SCRATCH_TOO_LARGE);
	ERR_HAS("5000");
	EXPECT(storefn_read_xrp(e, fd, NULL, 512, 1 << 30, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_CHAIN);
	EXPECT(storefn_read_xrp(e, fd, NULL, 512, 0, l, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_ARG);
	ERR_HAS("lambda");
	EXPECT(storefn_read_xrp(e, fd, NULL, 512, 0, x, NULL, 16, NULL), STOREFN_STATUS_ARG);
	EXPECT(storefn_read_xrp(NULL, fd, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_ARG);

	/* A closed descriptor, and one that never was. */
	int fd2 = open(db, O_RDONLY);
	CHECK(fd2 >= 0);
	close(fd2);
	query(&q, 1);
	EXPECT(storefn_read_xrp(e, fd2, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_BAD_FD);
	ERR_HAS("fd");
	EXPECT(storefn_read_xrp(e, -1, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_BAD_FD);

	uint32_t file = 0;
	EXPECT(storefn_engine_register(e, fd, &file), STOREFN_STATUS_OK);
	query(&q, 960);
	EXPECT(storefn_read_xrp_file(e, file, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_OK);
	CHECK(q.values[0].found == 1 && value_is(q.values[0].value, 960));
	EXPECT(storefn_read_xrp_file(e, 999, NULL, 512, 0, x, (uint8_t *)&q, sizeof q, NULL), STOREFN_STATUS_ARG);
	EXPECT(storefn_engine_forget(e, fd), STOREFN_STATUS_OK);
	EXPECT(storefn_engine_forget(e, fd), STOREFN_STATUS_ARG);
	close(fd);
	EXPECT(storefn_engine_register(e, fd, &file), STOREFN_STATUS_BAD_FD);
}

static void batched(const char *db, storefn_prog *x)
{
	storefn_engine_config cfg;
	EXPECT(storefn_engine_config_default(&cfg), STOREFN_STATUS_OK);
	CHECK(cfg.ring_depth > 0 && cfg.buffers > 0 && cfg.chains > 0 && cfg.max_hops > 0);
	cfg.ring_depth = 100000;
	storefn_engine *e = NULL;
	EXPECT(storefn_engine_new(&cfg, &e), STOREFN_STATUS_ARG);
	ERR_HAS("ring_depth");
	cfg.ring_depth = 64;
	cfg.buffers = 16;
	cfg.chains = 8;
	EXPECT(storefn_engine_new(&cfg, &e), STOREFN_STATUS_OK);
	int fd = open(db, O_RDONLY);
	enum { N = 40 };
	static struct sg_query q[N];
	int seen[N] = {0};
	size_t submitted = 0, reaped = 0, n = 0;
	storefn_completion c[3];
	while (reaped < N) {
		while (submitted < N) {
			query(&q[submitted], submitted * 7);
			storefn_status s = storefn_submit_xrp(e, fd, 512, 0, x, (uint8_t *)&q[submitted], sizeof q[submitted], 1000 + submitted);
			if (s == STOREFN_STATUS_FULL)
				break; /* 8 chain slots: reap first */
			EXPECT(s, STOREFN_STATUS_OK);
			submitted++;
		}
		EXPECT(storefn_reap(e, 1, c, 3, &n), STOREFN_STATUS_OK);
		CHECK(n >= 1 && n <= 3);
		for (size_t i = 0; i < n; i++) {
			size_t k = (size_t)(c[i].token - 1000);
			CHECK(k < N && !seen[k] && c[i].status == STOREFN_STATUS_OK && c[i].hops == 3);
			CHECK(q[k].values[0].found == 1 && value_is(q[k].values[0].value, k * 7));
			seen[k] = 1;
		}
		reaped += n;
	}
	size_t live = 99;
	EXPECT(storefn_in_flight(e, &live), STOREFN_STATUS_OK);
	CHECK(live == 0);
	/* A failing chain is reported by its completion. */
	query(&q[0], 1);
	EXPECT(storefn_submit_xrp(e, fd, 512, 1 << 30, x, (uint8_t *)&q[0], sizeof q[0], 7), STOREFN_STATUS_OK);
	EXPECT(storefn_reap(e, 1, c, 3, &n), STOREFN_STATUS_OK);
	CHECK(n == 1 && c[0].token == 7 && c[0].status == STOREFN_STATUS_CHAIN);
	ERR_HAS("chain 7");
	EXPECT(storefn_reap(e, 0, c, 3, &n), STOREFN_STATUS_OK);
	CHECK(n == 0);
	EXPECT(storefn_reap(e, 0, NULL, 3, &n), STOREFN_STATUS_ARG);
	static uint8_t big[4097];
	EXPECT(storefn_submit_xrp(e, fd, 512, 0, x, big, sizeof big, 1), STOREFN_STATUS_SCRATCH_TOO_LARGE);
	close(fd);
	EXPECT(storefn_submit_xrp(e, fd, 512, 0, x, (uint8_t *)&q[0], sizeof q[0], 1), STOREFN_STATUS_BAD_FD);
	storefn_engine_free(e);
}

static void lambda(storefn_engine *e, const char *data, const char *out_file, storefn_prog *l, storefn_prog *x)
{
	int fd = open(data, O_RDONLY);
	CHECK(fd >= 0);
	uint8_t out[4096];
	size_t n = 0;
	EXPECT(storefn_pread_lambda(e, fd, out, sizeof out, 8192, 0, l, &n), STOREFN_STATUS_OK);
	CHECK(n > 0 && n <= sizeof out);
	EXPECT(storefn_pread_lambda(e, fd, out, 0, 8192, 0, l, &n), STOREFN_STATUS_CHAIN);
	EXPECT(storefn_pread_lambda(e, fd, out, sizeof out, 8192, 1 << 30, l, &n), STOREFN_STATUS_ARG);
	EXPECT(storefn_pread_lambda(e, fd, out, sizeof out, 8192, 0, x, &n), STOREFN_STATUS_ARG);
	EXPECT(storefn_pread_lambda(e, fd, out, sizeof out, 8192, 0, l, NULL), STOREFN_STATUS_ARG);
	close(fd);
	EXPECT(storefn_pread_lambda(e, fd, out, sizeof out, 8192, 0, l, &n), STOREFN_STATUS_BAD_FD);

	int w = open(out_file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(w >= 0);
	static uint8_t input[8192];
	for (size_t i = 0; i < sizeof input; i++)
		input[i] = (uint8_t)(i * 31);
	size_t written = 0;
	EXPECT(storefn_pwrite_lambda(e, w, input, sizeof input, 0, l, out, sizeof out, &written), STOREFN_STATUS_OK);
	CHECK(written > 0 && lseek(w, 0, SEEK_END) == (off_t)written);
	close(w);
	int ro = open(out_file, O_RDONLY);
	EXPECT(storefn_pwrite_lambda(e, ro, input, sizeof input, 0, l, out, sizeof out, &written), STOREFN_STATUS_IO);
	close(ro);
	EXPECT(storefn_pwrite_lambda(e, ro, input, sizeof input, 0, l, out, sizeof out, &written), STOREFN_STATUS_BAD_FD);
}

static void kv_local(const char *db)
{
	storefn_kv *kv = NULL;
	EXPECT(storefn_kv_open("/nonexistent/db", 0, &kv), STOREFN_STATUS_KV);
	ERR_HAS("/nonexistent/db");
	EXPECT(storefn_kv_open(db, 1, &kv), STOREFN_STATUS_OK);
	uint8_t v[STOREFN_VALUE_BYTES];
	int32_t found = -1;
	EXPECT(storefn_kv_get(kv, 42, v, &found), STOREFN_STATUS_OK);
	CHECK(found == 1 && value_is(v, 42));
	EXPECT(storefn_kv_get(kv, 961, v, &found), STOREFN_STATUS_OK);
	CHECK(found == 0);
	uint64_t keys[3] = {3, 9999, 900};
	uint8_t vals[3 * STOREFN_VALUE_BYTES], fnd[3];
	EXPECT(storefn_kv_multiget(kv, keys, 3, vals, fnd), STOREFN_STATUS_OK);
	CHECK(fnd[0] == 1 && fnd[1] == 0 && fnd[2] == 1);
	CHECK(value_is(vals, 3) && value_is(vals + 2 * STOREFN_VALUE_BYTES, 900));
	EXPECT(storefn_kv_multiget(kv, NULL, 3, vals, fnd), STOREFN_STATUS_ARG);
	storefn_kv_free(kv);
	storefn_kv_free(NULL);
}

static void remote(const char *addr, const char *token, const char *dead, storefn_prog *x, storefn_prog *l)
{
	storefn_client *c = NULL;
	EXPECT(storefn_client_connect(dead, token, 2000, &c), STOREFN_STATUS_CONN);
	EXPECT(storefn_client_connect(addr, "/nonexistent/token", 0, &c), STOREFN_STATUS_ARG);
	EXPECT(storefn_client_connect(addr, NULL, 2000, &c), STOREFN_STATUS_CONN); /* AUTH needed */
	EXPECT(storefn_client_connect(addr, token, 2000, &c), STOREFN_STATUS_OK);
	EXPECT(storefn_client_push(c, x), STOREFN_STATUS_OK);

	uint8_t buf[512];
	size_t got = 0;
	EXPECT(storefn_client_read(c, "db", buf, sizeof buf, 0, &got), STOREFN_STATUS_OK);
	CHECK(got == sizeof buf);
	EXPECT(storefn_client_read(c, "../outside", buf, sizeof buf, 0, &got), STOREFN_STATUS_REMOTE);
	struct sg_query q;
	query(&q, 77);
	uint32_t hops = 0;
	EXPECT(storefn_client_read_xrp(c, "db", 512, 0, x, (uint8_t *)&q, sizeof q, &hops), STOREFN_STATUS_OK);
	CHECK(q.values[0].found == 1 && value_is(q.values[0].value, 77) && hops == 3);
	static uint8_t big[4097];
	EXPECT(storefn_client_read_xrp(c, "db", 512, 0, x, big, sizeof big, &hops), STOREFN_STATUS_SCRATCH_TOO_LARGE);
	uint8_t out[4096];
	EXPECT(storefn_client_lambda(c, "data", 8192, 0, l, out, sizeof out, &got), STOREFN_STATUS_OK);
	CHECK(got > 0);

	struct sg_query q2;
	query(&q2, 500);
	storefn_remote_req r[3];
	memset(r, 0, sizeof r);
	r[0] = (storefn_remote_req){.kind = STOREFN_REQ_KIND_READ, .path = "db", .offset = 512, .count = 512, .buf = buf, .buf_len = sizeof buf};
	r[1] = (storefn_remote_req){.kind = STOREFN_REQ_KIND_XRP, .path = "db", .count = 512, .prog = x, .buf = (uint8_t *)&q2, .buf_len = sizeof q2};
	r[2] = (storefn_remote_req){.kind = STOREFN_REQ_KIND_LAMBDA, .path = "missing", .count = 8, .prog = l, .buf = out, .buf_len = sizeof out};
	EXPECT(storefn_client_call(c, r, 3), STOREFN_STATUS_OK);
	CHECK(r[0].status == STOREFN_STATUS_OK && r[0].result_len == 512);
	CHECK(r[1].status == STOREFN_STATUS_OK && q2.values[0].found == 1 && value_is(q2.values[0].value, 500));
	CHECK(r[2].status == STOREFN_STATUS_REMOTE);
	r[0].kind = 9;
	EXPECT(storefn_client_call(c, r, 1), STOREFN_STATUS_ARG);
	ERR_HAS("kind 9");

	storefn_kv *kv = NULL;
	EXPECT(storefn_kv_open_remote(addr, token, "db", 0, &kv), STOREFN_STATUS_OK);
	uint8_t v[STOREFN_VALUE_BYTES];
	int32_t found = 0;
	EXPECT(storefn_kv_get(kv, 321, v, &found), STOREFN_STATUS_OK);
	CHECK(found == 1 && value_is(v, 321));
	uint64_t keys[2] = {1, 2000};
	uint8_t vals[2 * STOREFN_VALUE_BYTES], fnd[2];
	EXPECT(storefn_kv_multiget(kv, keys, 2, vals, fnd), STOREFN_STATUS_OK);
	CHECK(fnd[0] == 1 && fnd[1] == 0 && value_is(vals, 1));

	/* The server goes away. */
	printf("STOP\n");
	fflush(stdout);
	char line[16];
	CHECK(fgets(line, sizeof line, stdin) != NULL);
	EXPECT(storefn_client_read(c, "db", buf, sizeof buf, 0, &got), STOREFN_STATUS_CONN);
	EXPECT(storefn_client_read_xrp(c, "db", 512, 0, x, (uint8_t *)&q, sizeof q, &hops), STOREFN_STATUS_CONN);
	EXPECT(storefn_kv_get(kv, 321, v, &found), STOREFN_STATUS_CONN);
	storefn_kv_free(kv);
	storefn_client_free(c);
	storefn_client_free(NULL);
}

int main(int argc, char **argv)
{
	if (argc != 10) {
		fprintf(stderr, "usage: DB XRP LAMBDA REFUSED DATA OUT ADDR TOKEN DEAD_ADDR\n");
		return 2;
	}
	CHECK(strcmp(storefn_last_error(), "") == 0);
	CHECK(strcmp(storefn_status_name(STOREFN_STATUS_VERIFY), "STOREFN_STATUS_VERIFY") == 0);
	CHECK(strcmp(storefn_status_name(12345), "STOREFN_STATUS_UNKNOWN") == 0);
	storefn_prog *x = NULL, *l = NULL;
	programs(argv[2], argv[4], &x, &l, argv[3]);
	storefn_engine *e = NULL;
	EXPECT(storefn_engine_new(NULL, &e), STOREFN_STATUS_OK);
	EXPECT(storefn_engine_new(NULL, NULL), STOREFN_STATUS_ARG);
	sync_reads(e, argv[1], x, l);
	batched(argv[1], x);
	lambda(e, argv[5], argv[6], l, x);
	kv_local(argv[1]);
	remote(argv[7], argv[8], argv[9], x, l);
	storefn_engine_free(e);
	storefn_engine_free(NULL);
	storefn_prog_free(x);
	storefn_prog_free(l);
	printf("ALL OK %d checks\n", checks);
	return 0;
}
