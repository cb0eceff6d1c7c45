/* A WiredTiger writer process for the staleness test: table "t" (S -> S) of KEYS keys; round r
 * rewrites a slice of the keys to "key<i>:r<r>:" plus (i + r) % 200 bytes of padding, and a
 * checkpoint follows every 100 ms, until the file named by argv[2] exists (or 300 s pass). Every
 * value a reader may see is thus "key<i>:r<r>:<pad>" for some round r that wrote key i. Prints
 * the last round on exit. Usage: writer DIR STOPFILE */
#include <wiredtiger.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEYS 20000

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, int r)
{
	fprintf(stderr, "writer: %s: %s\n", what, wiredtiger_strerror(r));
	exit(2);
}

static void put(WT_CURSOR *c, int i, int r)
{
	char k[32], v[256];
	int n = snprintf(v, sizeof v, "key%06d:r%d:", i, r);
	int pad = (i + r) % 200;
	if (n + pad >= (int)sizeof v)
		pad = (int)sizeof v - n - 1;
	memset(v + n, 'a' + (i + r) % 26, pad);
	v[n + pad] = 0;
	snprintf(k, sizeof k, "key%06d", i);
	c->set_key(c, k);
	c->set_value(c, v);
	int e = c->insert(c);
	if (e)
		die("insert", e);
}

int main(int argc, char **argv)
{
	WT_CONNECTION *conn;
	WT_SESSION *s;
	WT_CURSOR *c;
	int e;
	if (argc != 3)
		return 2;
	if ((e = wiredtiger_open(argv[1], NULL, "create,cache_size=64MB", &conn)))
		die("open", e);
	if ((e = conn->open_session(conn, NULL, NULL, &s)))
		die("session", e);
	if ((e = s->create(s, "table:t", "key_format=S,value_format=S")))
		die("create", e);
	if ((e = s->open_cursor(s, "table:t", NULL, NULL, &c)))
		die("cursor", e);
	for (int i = 0; i < KEYS; i++)
		put(c, i, 0);
	if ((e = s->checkpoint(s, NULL)))
		die("checkpoint", e);
	printf("ready\n");
	fflush(stdout);
	double start = now(), last = now();
	int r = 1;
	while (access(argv[2], F_OK) != 0 && now() - start < 300) {
		for (int i = (r * 7919) % 1000; i < KEYS; i += 1 + r % 7)
			put(c, i, r);
		if (now() - last >= 0.1) {
			if ((e = s->checkpoint(s, NULL)))
				die("checkpoint", e);
			last = now();
		}
		r++;
	}
	c->close(c);
	conn->close(conn, NULL);
	printf("%d\n", r);
	return 0;
}
