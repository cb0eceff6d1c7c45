/* Byte-load hash: 64-bit FNV-1a of the first 1024 bytes, seeded with the argument. */
#include "bench.h"

BENCH(fnv1a)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u64 h = 0xcbf29ce484222325ULL ^ bench_arg(ctx);

	for (int i = 0; i < 1024; i++) {
		h ^= d[i];
		h *= 0x100000001b3ULL;
	}
	return bench_ret(ctx, h);
}
