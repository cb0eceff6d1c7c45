/* Pure 32-bit ALU: 2048 steps of xorshift32 from the argument's low bits, summed. */
#include "bench.h"

BENCH(xorshift32)
{
	__u32 x = (__u32)bench_arg(ctx) | 1;
	__u32 s = 0;

	for (int i = 0; i < 2048; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		s += x;
	}
	return bench_ret(ctx, s);
}
