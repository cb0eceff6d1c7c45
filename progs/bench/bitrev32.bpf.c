/* 32-bit ALU bit tricks: reverse the bits of each of the first 512 u32 words and xor them
 * together with the argument. */
#include "bench.h"

static __always_inline __u32 rev(__u32 x)
{
	x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
	x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
	x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
	x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
	return (x >> 16) | (x << 16);
}

BENCH(bitrev32)
{
	const __u32 *d = (const __u32 *)ctx->data;
	__u32 x = (__u32)bench_arg(ctx);

	for (int i = 0; i < 512; i++)
		x ^= rev(d[i]) + (__u32)i;
	return bench_ret(ctx, x);
}
