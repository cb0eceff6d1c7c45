/* Hops larger than XRP's 4 KiB window: each page starts with {u64 next, u64 next_size} and
 * ends with a u64 marker. The function checks that data_len is the size it asked for, adds the
 * page's last u64 (reachable only through the whole hop) and follows the page's pointer.
 * scratch: [0] size asked for the hop being handed over (the caller sets the first), [1] sum of
 * markers, [2] hops, [3] 1 on a length mismatch, [4] the data_len seen then, [5] non-zero:
 * also read the u64 just past data_len (must fault). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 big_hops(struct bpf_xrp *ctx)
{
	__u64 *s = (__u64 *)ctx->scratch;
	__u64 *blk = (__u64 *)ctx->data;
	__u64 len = ctx->data_len;

	if (len != s[0] || len < 16) {
		s[3] = 1;
		s[4] = len;
		ctx->done = 1;
		return 0;
	}
	s[1] += *(__u64 *)(ctx->data + len - 8);
	if (s[5])
		s[1] += *(__u64 *)(ctx->data + len);
	s[2] += 1;
	if (blk[0] == 0) {
		ctx->done = 1;
		return 0;
	}
	ctx->next_addr[0] = blk[0];
	ctx->size[0] = blk[1];
	s[0] = blk[1];
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
