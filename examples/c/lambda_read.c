/* λ-IO's pread_λ on libstorefn: runs a λ program over a file range and writes its output.
 *
 *   lambda_read FILE PROG.o OFF LEN OUT_CAP OUT_FILE                     local
 *   lambda_read --remote ADDR TOKEN_FILE FILE PROG.o OFF LEN OUT_CAP OUT_FILE
 *                                          on the server (FILE relative to its directory)
 *
 * Prints `out N bytes` and writes the N output bytes to OUT_FILE, as
 * `storefn lambda run FILE --prog PROG.o --range OFF:LEN --out-cap OUT_CAP --out OUT_FILE` does.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storefn.h"

static int fail(const char *what, storefn_status s)
{
	fprintf(stderr, "%s: %s: %s\n", what, storefn_status_name((int32_t)s), storefn_last_error());
	return 1;
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
	if (argc - a != 6) {
		fprintf(stderr, "usage: %s [--remote ADDR TOKEN_FILE|-] FILE PROG.o OFF LEN OUT_CAP OUT_FILE\n", argv[0]);
		return 2;
	}
	const char *file = argv[a], *out_path = argv[a + 5];
	uint64_t off = strtoull(argv[a + 2], NULL, 0);
	size_t len = (size_t)strtoull(argv[a + 3], NULL, 0);
	size_t cap = (size_t)strtoull(argv[a + 4], NULL, 0);
	uint8_t *out = malloc(cap ? cap : 1);
	size_t n = 0;
	int rc = 0;

	storefn_prog *prog = NULL;
	storefn_status s = storefn_prog_load_path(argv[a + 1], NULL, STOREFN_PROG_TYPE_LAMBDA, &prog);
	if (s != STOREFN_STATUS_OK)
		return fail("storefn_prog_load_path", s);
	if (addr) {
		storefn_client *c = NULL;
		s = storefn_client_connect(addr, token, 0, &c);
		if (s == STOREFN_STATUS_OK)
			s = storefn_client_lambda(c, file, (uint32_t)len, off, prog, out, cap, &n);
		if (s != STOREFN_STATUS_OK)
			rc = fail("remote lambda", s);
		storefn_client_free(c);
	} else {
		int fd = open(file, O_RDONLY);
		if (fd < 0) {
			perror(file);
			return 1;
		}
		storefn_engine *eng = NULL;
		s = storefn_engine_new(NULL, &eng);
		if (s == STOREFN_STATUS_OK)
			s = storefn_pread_lambda(eng, fd, out, cap, len, off, prog, &n);
		if (s != STOREFN_STATUS_OK)
			rc = fail("storefn_pread_lambda", s);
		storefn_engine_free(eng);
		close(fd);
	}
	if (rc == 0) {
		FILE *f = fopen(out_path, "wb");
		if (!f || fwrite(out, 1, n, f) != n || fclose(f) != 0) {
			perror(out_path);
			rc = 1;
		} else {
			printf("out %zu bytes\n", n);
		}
	}
	storefn_prog_free(prog);
	free(out);
	return rc;
}
