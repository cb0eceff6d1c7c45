/* λ workload grep: which 4 KiB text rows contain GREP_NEEDLE (storefn_lambda.h). */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

static const char needle[GREP_NEEDLE_BYTES] = GREP_NEEDLE;

SEC("lambda")
__u64 grep(struct context *c)
{
	const __u8 *in = c->buf_i;
	__u64 *out = c->buf_o;
	__u32 *idx = (__u32 *)(out + 2);
	__u64 rows = c->size_i / GREP_ROW_BYTES;
	__u64 hits = 0;

	for (__u64 r = 0; r < rows; r++) {
		const __u8 *row = in + r * GREP_ROW_BYTES;
		for (__u32 i = 0; i + GREP_NEEDLE_BYTES <= GREP_ROW_BYTES; i++) {
			if (row[i] != (__u8)needle[0])
				continue;
			if (storefn_memcmp(row + i, needle, GREP_NEEDLE_BYTES) != 0)
				continue;
			if (hits < GREP_MAX_HITS)
				idx[hits] = (__u32)r;
			hits++;
			break;
		}
	}
	out[0] = rows;
	out[1] = hits;
	return 16 + 4 * (hits < GREP_MAX_HITS ? hits : GREP_MAX_HITS);
}

char LICENSE[] SEC("license") = "GPL";
