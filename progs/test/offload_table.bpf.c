/* Accept (offload): exercises the table helpers directly.
 * offload/cache: inserts each struct storefn_cache_item of msg, writes each result (s64) to out.
 * offload/invalidate: deletes key `offset`, returns the helper's result.
 * offload/pred: looks key `offset` up into msg (read-only): must fault with a bad write. */
#include <storefn_offload.h>
#include <bpf/bpf_helpers.h>

SEC("offload/cache")
__s64 insert_all(struct storefn_offload_ctx *c)
{
	const struct storefn_cache_item *items = (const void *)(unsigned long)c->msg;
	__s64 *res = (__s64 *)(unsigned long)c->out;
	__u32 n = c->msg_len / sizeof(*items);
	for (__u32 i = 0; i < n && i < 16; i++)
		res[i] = storefn_table_insert(&items[i]);
	return n;
}

SEC("offload/invalidate")
__s64 delete_one(struct storefn_offload_ctx *c)
{
	return storefn_table_delete(c->offset);
}

SEC("offload/pred")
__s64 lookup_into_msg(struct storefn_offload_ctx *c)
{
	return storefn_table_lookup(c->offset, (struct storefn_cache_item *)(unsigned long)c->msg);
}

char LICENSE[] SEC("license") = "GPL";
