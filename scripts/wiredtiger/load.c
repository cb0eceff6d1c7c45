/* Builds the benchmark database of docs/results/wiredtiger.md with WiredTiger's own C API:
 * table "usertable" (S -> S, WiredTiger's default page sizes: internal 4 KiB, leaf 32 KiB) of
 * N keys "user%012d" with 100-byte values, then a checkpoint; writes the keys, one a line, to
 * KEYS. Build: cc -O2 -o load load.c -lwiredtiger. Usage: load DIR N KEYS */
#include <wiredtiger.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, int r)
{
	fprintf(stderr, "load: %s: %s\n", what, wiredtiger_strerror(r));
	exit(2);
}

int main(int argc, char **argv)
{
	WT_CONNECTION *conn;
	WT_SESSION *s;
	WT_CURSOR *c;
	int e;
	if (argc != 4) {
		fprintf(stderr, "usage: load DIR N KEYS\n");
		return 2;
	}
	long n = atol(argv[2]);
	FILE *keys = fopen(argv[3], "w");
	if (!keys) {
		perror(argv[3]);
		return 2;
	}
	if ((e = wiredtiger_open(argv[1], NULL, "create,cache_size=256MB", &conn)))
		die("open", e);
	if ((e = conn->open_session(conn, NULL, NULL, &s)))
		die("session", e);
	if ((e = s->create(s, "table:usertable", "key_format=S,value_format=S")))
		die("create", e);
	if ((e = s->open_cursor(s, "table:usertable", NULL, "bulk", &c)))
		die("cursor", e);
	char k[32], v[101];
	for (long i = 0; i < n; i++) {
		snprintf(k, sizeof k, "user%012ld", i);
		for (int j = 0; j < 100; j++)
			v[j] = 'a' + (int)((i * 31 + j * 7) % 26);
		v[100] = 0;
		c->set_key(c, k);
		c->set_value(c, v);
		if ((e = c->insert(c)))
			die("insert", e);
		fprintf(keys, "%s\n", k);
	}
	c->close(c);
	if ((e = s->checkpoint(s, NULL)))
		die("checkpoint", e);
	conn->close(conn, NULL);
	fclose(keys);
	return 0;
}
