/* DDS's page-server offload functions (offload program type, storefn_offload.h).
 * cache: each page a host write covers is cached as page -> {LSN, file, offset}.
 * invalidate: a host read of a page (to apply a log record) drops it from the table.
 * pred: a GetPage is offloaded when the cached LSN >= the requested one.
 * func: the read of the offloaded page (looked up again: an entry may have gone since pred). */
#include <storefn_offload.h>
#include <pageserver.h>
#include <bpf/bpf_helpers.h>

/* Request i of the batch, found through the batch's index (never by position: a message of
 * another length must not shift the others); 0 when it is no GetPage or out of bounds. */
static __always_inline const struct ps_get_page *request(const struct storefn_offload_ctx *c, __u32 i)
{
	const __u8 *msg = (const __u8 *)(unsigned long)c->msg;
	if (c->msg_len < PS_BATCH_HEADER)
		return 0;
	__u32 count = *(const __u32 *)msg;
	if (i >= count || i >= PS_MAX_BATCH ||
	    PS_BATCH_HEADER + (__u64)(i + 1) * sizeof(struct ps_batch_entry) > c->msg_len)
		return 0;
	const struct ps_batch_entry *e = (const struct ps_batch_entry *)(msg + PS_BATCH_HEADER) + i;
	__u32 at = e->offset;
	if (e->len != sizeof(struct ps_get_page) || at % 8 ||
	    (__u64)at + sizeof(struct ps_get_page) > c->msg_len)
		return 0;
	return (const struct ps_get_page *)(msg + at);
}

SEC("offload/pred")
__s64 pred(struct storefn_offload_ctx *c)
{
	__u8 *verdict = (__u8 *)(unsigned long)c->out;
	if (c->msg_len < PS_BATCH_HEADER)
		return -1;
	__u32 count = *(const __u32 *)(unsigned long)c->msg;
	if (count > PS_MAX_BATCH || count > c->out_len)
		return -1;
	for (__u32 i = 0; i < count && i < PS_MAX_BATCH; i++) {
		const struct ps_get_page *r = request(c, i);
		struct storefn_cache_item item;
		verdict[i] = STOREFN_VERDICT_HOST;
		if (r && storefn_table_lookup(r->page, &item) == 0 && item.version >= r->lsn)
			verdict[i] = STOREFN_VERDICT_OFFLOAD;
	}
	return count;
}

SEC("offload/func")
__s64 func(struct storefn_offload_ctx *c)
{
	const struct ps_get_page *r = request(c, c->index);
	struct storefn_cache_item item;
	struct storefn_read_op *op = (struct storefn_read_op *)(unsigned long)c->out;
	if (!r || storefn_table_lookup(r->page, &item) != 0 || item.version < r->lsn)
		return -1;
	op->file = item.file;
	op->size = item.size;
	op->offset = item.offset;
	return 0;
}

SEC("offload/cache")
__s64 cache(struct storefn_offload_ctx *c)
{
	const __u8 *data = (const __u8 *)(unsigned long)c->msg;
	struct storefn_cache_item *items = (struct storefn_cache_item *)(unsigned long)c->out;
	__u32 max = c->out_len / sizeof(struct storefn_cache_item);
	__u32 n = 0;
	if (c->offset % PS_PAGE_BYTES)
		return 0; /* only whole, aligned pages are cached */
	for (__u32 i = 0; i < 8 && n < max; i++) {
		__u64 at = (__u64)i * PS_PAGE_BYTES;
		if (at + PS_PAGE_BYTES > c->io_len)
			break;
		items[n].key = c->offset / PS_PAGE_BYTES + i;
		items[n].version = *(const __u64 *)(data + at);
		items[n].file = c->file;
		items[n].size = PS_PAGE_BYTES;
		items[n].offset = c->offset + at;
		n++;
	}
	return n;
}

SEC("offload/invalidate")
__s64 invalidate(struct storefn_offload_ctx *c)
{
	__u64 *keys = (__u64 *)(unsigned long)c->out;
	__u32 max = c->out_len / sizeof(__u64);
	__u32 n = 0;
	if (c->op != STOREFN_OP_READ || c->io_len == 0)
		return 0; /* a write re-caches the page through cache() */
	__u64 first = c->offset / PS_PAGE_BYTES;
	__u64 last = (c->offset + c->io_len - 1) / PS_PAGE_BYTES;
	for (__u64 p = first; p <= last && n < max && n < 16; p++)
		keys[n++] = p;
	return n;
}

char LICENSE[] SEC("license") = "GPL";
