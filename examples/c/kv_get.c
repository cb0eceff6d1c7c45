/* XRP's BPF-KV get path (simplekv's `get` loop) on libstorefn.
 *
 *   kv_get DB PROG.o KEY...                         local: storefn_read_xrp on DB's descriptor
 *   kv_get --remote ADDR TOKEN_FILE DB PROG.o KEY...  remote: the chains run on the server,
 *                                                     every key's request in one frame
 *
 * PROG.o is an XRP program in BPF-KV's ScatterGatherQuery layout (progs/bpfkv_get.bpf.c, or
 * XRP's own get.c). Prints, per key, what `storefn kv get DB --key KEY` prints: the value, or
 * `not found`. Exit 0 when every call worked (found or not), 1 on an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storefn.h"

#define NODE_BYTES 512
#define SG_KEYS 32
#define SG_FAILED 0x80000000u

/* BPF-KV's struct ScatterGatherQuery (LP64), the scratch of every chain. */
struct maybe_value {
	uint8_t found;
	uint8_t value[64];
};
struct sg_query {
	uint64_t root_pointer;
	uint64_t value_ptr;
	uint32_t state_flags;
	int32_t current_index;
	int32_t n_keys;
	uint32_t pad;
	uint64_t keys[SG_KEYS];
	struct maybe_value values[SG_KEYS];
};

static int fail(const char *what, storefn_status s)
{
	fprintf(stderr, "%s: %s: %s\n", what, storefn_status_name((int32_t)s), storefn_last_error());
	return 1;
}

/* One key per query, starting at the root (offset 0), as simplekv's get does. */
static void query_for(struct sg_query *q, uint64_t key)
{
	memset(q, 0, sizeof *q);
	q->root_pointer = 0;
	q->n_keys = 1;
	q->keys[0] = key;
}

static void print_result(const struct sg_query *q)
{
	if (q->values[0].found)
		printf("%.64s\n", (const char *)q->values[0].value);
	else
		printf("not found\n");
}

static int local_get(const char *db, storefn_prog *prog, char **keys, int nkeys)
{
	/* XRP reads O_DIRECT files; a file system without O_DIRECT (tmpfs) is read buffered. */
	int fd = open(db, O_RDONLY | O_DIRECT);
	if (fd < 0 && errno == EINVAL)
		fd = open(db, O_RDONLY);
	if (fd < 0) {
		perror(db);
		return 1;
	}
	storefn_engine *eng = NULL;
	storefn_status s = storefn_engine_new(NULL, &eng);
	if (s != STOREFN_STATUS_OK) {
		close(fd);
		return fail("storefn_engine_new", s);
	}
	static uint8_t buf[NODE_BYTES];
	struct sg_query q;
	int rc = 0;
	for (int i = 0; i < nkeys && rc == 0; i++) {
		query_for(&q, strtoull(keys[i], NULL, 10));
		s = storefn_read_xrp(eng, fd, buf, NODE_BYTES, 0, prog, (uint8_t *)&q, sizeof q, NULL);
		if (s != STOREFN_STATUS_OK)
			rc = fail("storefn_read_xrp", s);
		else if (q.state_flags & SG_FAILED)
			rc = (fprintf(stderr, "key %s: inconsistent node\n", keys[i]), 1);
		else
			print_result(&q);
	}
	storefn_engine_free(eng);
	close(fd);
	return rc;
}

static int remote_get(const char *addr, const char *token, const char *db, storefn_prog *prog,
		      char **keys, int nkeys)
{
	storefn_client *c = NULL;
	storefn_status s = storefn_client_connect(addr, token, 0, &c);
	if (s != STOREFN_STATUS_OK)
		return fail("storefn_client_connect", s);
	struct sg_query *q = calloc((size_t)nkeys, sizeof *q);
	storefn_remote_req *reqs = calloc((size_t)nkeys, sizeof *reqs);
	int rc = 0;
	for (int i = 0; i < nkeys; i++) {
		query_for(&q[i], strtoull(keys[i], NULL, 10));
		reqs[i].kind = STOREFN_REQ_KIND_XRP;
		reqs[i].path = db;
		reqs[i].offset = 0;
		reqs[i].count = NODE_BYTES;
		reqs[i].prog = prog;
		reqs[i].buf = (uint8_t *)&q[i];
		reqs[i].buf_len = sizeof q[i];
	}
	s = storefn_client_call(c, reqs, (size_t)nkeys);
	if (s != STOREFN_STATUS_OK)
		rc = fail("storefn_client_call", s);
	for (int i = 0; i < nkeys && rc == 0; i++) {
		if (reqs[i].status != STOREFN_STATUS_OK)
			rc = fail("XRP request", (storefn_status)reqs[i].status);
		else if (q[i].state_flags & SG_FAILED)
			rc = (fprintf(stderr, "key %s: inconsistent node\n", keys[i]), 1);
		else
			print_result(&q[i]);
	}
	free(reqs);
	free(q);
	storefn_client_free(c);
	return rc;
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *token = NULL;
	int a = 1;
	if (argc > 3 && strcmp(argv[1], "--remote") == 0) {
		addr = argv[2];
		token = strcmp(argv[3], "-") == 0 ? NULL : argv[3];
		a = 4;
	}
	if (argc - a < 3) {
		fprintf(stderr, "usage: %s [--remote ADDR TOKEN_FILE|-] DB PROG.o KEY...\n", argv[0]);
		return 2;
	}
	storefn_prog *prog = NULL;
	storefn_status s = storefn_prog_load_path(argv[a + 1], NULL, STOREFN_PROG_TYPE_XRP, &prog);
	if (s != STOREFN_STATUS_OK)
		return fail("storefn_prog_load_path", s);
	int rc = addr ? remote_get(addr, token, argv[a], prog, argv + a + 2, argc - a - 2)
		      : local_get(argv[a], prog, argv + a + 2, argc - a - 2);
	storefn_prog_free(prog);
	return rc;
}
