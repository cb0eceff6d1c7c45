/* BPF-KV point lookup, 4096 B nodes (fan-out 255), for 4 KiB-block devices such as zram.
 * Scratch ABI: docs/FORMAT.md, "Lookup scratch ABI".
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define BPFKV_NODE struct bpfkv_node4096
#define BPFKV_NODE_BYTES 4096
#define BPFKV_FANOUT 255
#include "bpfkv_lookup.h"

SEC("xrp")
__u32 kv_lookup_4k(struct bpf_xrp *ctx)
{
	return bpfkv_lookup(ctx);
}

char LICENSE[] SEC("license") = "GPL";
