/* The bench workloads' shared ABI (`storefn prog bench`, storefn_vm::harness): an XRP function
 * reads its 4 KiB input through ctx->data, takes one argument from scratch[0] and leaves its
 * answer in scratch[1] (then ends the chain). Each has a native Rust twin in
 * crates/storefn-vm/src/harness/workloads.rs; every engine's answer is checked against it.
 * No globals (peer VMs load the raw instructions) and no helpers.
 */
#ifndef STOREFN_BENCH_H
#define STOREFN_BENCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define BENCH_DATA_BYTES 4096

#define BENCH(name) SEC("xrp") __u32 name(struct bpf_xrp *ctx)

static __always_inline __u64 bench_arg(struct bpf_xrp *ctx)
{
	return ((__u64 *)ctx->scratch)[0];
}

static __always_inline __u32 bench_ret(struct bpf_xrp *ctx, __u64 v)
{
	((__u64 *)ctx->scratch)[1] = v;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

#endif
