/* Pure 64-bit ALU: 1024 steps of a linear congruential generator, xor-folded. */
#include "bench.h"

BENCH(lcg)
{
	__u64 x = bench_arg(ctx), acc = 0;

	for (int i = 0; i < 1024; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		acc ^= x >> 33;
	}
	return bench_ret(ctx, acc);
}
