/* Nested loops with multiplies: the trace of A x B for two 8x8 u32 matrices from the block,
 * plus the argument. */
#include "bench.h"

BENCH(matmul)
{
	const __u32 *a = (const __u32 *)ctx->data;
	const __u32 *b = a + 64;
	__u64 t = bench_arg(ctx);

	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++) {
			__u64 c = 0;
			for (int k = 0; k < 8; k++)
				c += (__u64)a[i * 8 + k] * b[k * 8 + j];
			t += c * (i == j) + (c >> 32);
		}
	return bench_ret(ctx, t);
}
