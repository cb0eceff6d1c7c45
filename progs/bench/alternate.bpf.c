/* Benchmark: loads that alternate between the data block and the scratch, neither proved, as
 * in WiredTiger's lookup (progs/engines/wiredtiger/lookup.bpf.c): a key compare in a called
 * function (its accesses keep their checks) reads a page byte through the engine's 32 KiB view
 * mask (wider than the 4 KiB the JIT proves for a block) and then a search-key byte in the
 * scratch, in turn. Sums the differences of 256 byte pairs from a position the argument picks.
 */
#include "bench.h"

#define VIEW_MASK 32767
#define KEY_MASK 511
#define PAIRS 256

static __attribute__((noinline)) __u64 key_diff(const __u8 *d, const __u8 *key, __u32 at)
{
	__u64 diff = 0;

	for (__u32 i = 0; i < PAIRS; i++)
		diff += (__u8)(d[(at + i) & VIEW_MASK] - key[i & KEY_MASK]);
	return diff;
}

BENCH(alternate)
{
	const __u8 *d = (const __u8 *)ctx->data;
	const __u8 *key = (const __u8 *)ctx->scratch + 64;
	__u32 at = bench_arg(ctx) % (BENCH_DATA_BYTES - PAIRS);

	return bench_ret(ctx, key_diff(d, key, at));
}
