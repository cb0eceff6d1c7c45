/* Accept: v3 atomics (add, fetch-add, or, xchg, cmpxchg) on scratch words. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 *s = (__u64 *)ctx->scratch;
	__u32 *w = (__u32 *)(s + 4);
	__sync_fetch_and_add(&s[0], 5);
	s[1] = __sync_fetch_and_add(&s[0], 10);
	__sync_fetch_and_or(&w[0], 0x100);
	s[2] = __sync_lock_test_and_set(&s[3], 77);
	s[5] = __sync_val_compare_and_swap(&s[6], 0, 9);
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
