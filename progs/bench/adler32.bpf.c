/* Checksum with modulo: Adler-32 of the first 2048 bytes, the argument's low 16 bits as the
 * initial `a`. */
#include "bench.h"

BENCH(adler32)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u32 a = (bench_arg(ctx) & 0xffff) % 65521, b = 0;

	for (int i = 0; i < 2048; i++) {
		a = (a + d[i]) % 65521;
		b = (b + a) % 65521;
	}
	return bench_ret(ctx, ((__u64)b << 16) | a);
}
