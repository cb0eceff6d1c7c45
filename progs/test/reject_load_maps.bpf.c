/* Reject (load): BPF maps are not supported; the loader names the .maps section. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&counts, &k);
	if (v)
		*v += 1;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
