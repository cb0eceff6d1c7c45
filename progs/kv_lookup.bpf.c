/* BPF-KV point lookup, 512 B nodes (fan-out 31): XRP's storage function for BPF-KV.
 * Scratch ABI: docs/FORMAT.md, "Lookup scratch ABI".
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define BPFKV_NODE struct bpfkv_node512
#define BPFKV_NODE_BYTES 512
#define BPFKV_FANOUT 31
#include "bpfkv_lookup.h"

SEC("xrp")
__u32 kv_lookup(struct bpf_xrp *ctx)
{
	return bpfkv_lookup(ctx);
}

char LICENSE[] SEC("license") = "GPL";
