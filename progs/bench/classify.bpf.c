/* Branchy code over bytes: classify the first 1024 bytes (digit, upper, lower, space, other)
 * and weigh the counts. */
#include "bench.h"

BENCH(classify)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u64 digit = 0, upper = 0, lower = 0, space = 0, other = 0;

	for (int i = 0; i < 1024; i++) {
		__u8 c = d[i];
		if (c >= '0' && c <= '9')
			digit++;
		else if (c >= 'A' && c <= 'Z')
			upper++;
		else if (c >= 'a' && c <= 'z')
			lower++;
		else if (c == ' ' || c == '\n' || c == '\t')
			space++;
		else
			other++;
	}
	return bench_ret(ctx, digit + 3 * upper + 5 * lower + 7 * space + 11 * other +
				      bench_arg(ctx));
}
