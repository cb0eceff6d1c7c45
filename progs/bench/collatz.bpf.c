/* Branchy data-dependent loop: the Collatz steps from the argument to 1 (at most 1000). */
#include "bench.h"

BENCH(collatz)
{
	__u64 n = bench_arg(ctx), steps = 0;

	while (n > 1 && steps < 1000) {
		if (n & 1)
			n = 3 * n + 1;
		else
			n >>= 1;
		steps++;
	}
	return bench_ret(ctx, steps);
}
