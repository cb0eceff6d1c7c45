/* Division-heavy loop: how many of the 16 numbers from the argument on are prime (trial
 * division by odd numbers). */
#include "bench.h"

BENCH(prime)
{
	__u64 base = bench_arg(ctx), count = 0;

	for (__u64 n = base; n < base + 16; n++) {
		int is = n >= 2;
		if (n > 3 && n % 2 == 0)
			is = 0;
		for (__u64 f = 3; is && f * f <= n && f < 4096; f += 2)
			if (n % f == 0)
				is = 0;
		count += is;
	}
	return bench_ret(ctx, count);
}
