/* Accept: BPF-to-BPF calls into .text subprograms (static, noinline) and a nested call. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __attribute__((noinline)) __u64 twice(__u64 x)
{
	return x * 2;
}

static __attribute__((noinline)) __u64 twice_plus(__u64 x, __u64 y)
{
	return twice(x) + y;
}

__attribute__((noinline)) __u64 global_fn(__u64 x)
{
	return x + 1000;
}

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 *s = (__u64 *)ctx->scratch;
	__u64 v = *(__u64 *)ctx->data;
	s[0] = twice_plus(v, 5);
	s[1] = global_fn(v);
	ctx->done = 1;
	return 7;
}

char LICENSE[] SEC("license") = "GPL";
