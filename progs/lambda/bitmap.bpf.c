/* λ workload bitmap (write path): run-length decode u16 runs into a packed bitmap
 * (storefn_lambda.h). Whole bytes of a run are filled with storefn_memset. */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 bitmap(struct context *c)
{
	const __u16 *runs = c->buf_i;
	__u8 *out = c->buf_o;
	__u64 n = c->size_i / 2;
	__u64 pos = 0;

	for (__u64 i = 0; i < n; i++) {
		__u64 len = runs[i];
		__u8 one = i & 1;
		/* Bit by bit up to a byte boundary; a byte is cleared when its first bit is set. */
		while (len > 0 && (pos & 7) != 0) {
			if (one)
				out[pos >> 3] |= (__u8)(1 << (pos & 7));
			pos++;
			len--;
		}
		__u64 whole = len >> 3;
		if (whole > 0) {
			if (storefn_memset(out + (pos >> 3), one ? 0xff : 0, whole) != 0)
				return 0;
			pos += whole << 3;
			len -= whole << 3;
		}
		while (len > 0) {
			if ((pos & 7) == 0)
				out[pos >> 3] = 0;
			if (one)
				out[pos >> 3] |= (__u8)(1 << (pos & 7));
			pos++;
			len--;
		}
	}
	return (pos + 7) >> 3;
}

char LICENSE[] SEC("license") = "GPL";
