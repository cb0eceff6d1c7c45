/* storefn: the `offload` program type (DDS offload functions; crates/storefn-vm/src/offload.rs,
 * docs/FORMAT.md "Offload context"). Four entry points, one ELF section each:
 *   SEC("offload/pred")       msg = batched requests; out = one verdict byte per request;
 *                             returns the number of requests.
 *   SEC("offload/func")       msg = the batch, index = the offloaded request; out = struct
 *                             storefn_read_op; returns 0, or < 0 to forward it to the host.
 *   SEC("offload/cache")      run on each host write: msg = data, file/offset/io_len = where;
 *                             out = struct storefn_cache_item[]; returns how many.
 *   SEC("offload/invalidate") run on each host read (op 1) or write (op 2); out = __u64 keys[];
 *                             returns how many keys to drop. */
#ifndef STOREFN_OFFLOAD_H
#define STOREFN_OFFLOAD_H

#include <linux/types.h>

struct storefn_offload_ctx {
	__u64 msg;      /* 0: input bytes (read-only) */
	__u32 msg_len;  /* 8 */
	__u32 index;    /* 12: func: which request */
	__u32 op;       /* 16: invalidate: STOREFN_OP_READ / STOREFN_OP_WRITE */
	__u32 file;     /* 20: cache/invalidate: file id */
	__u64 offset;   /* 24: cache/invalidate: file offset */
	__u64 out;      /* 32: output buffer (read-write) */
	__u32 out_len;  /* 40 */
	__u32 io_len;   /* 44: cache/invalidate: bytes of the I/O */
};

struct storefn_cache_item {
	__u64 key;
	__u64 version;
	__u32 file;
	__u32 size;
	__u64 offset;
};

struct storefn_read_op {
	__u32 file;
	__u32 size;
	__u64 offset;
};

#define STOREFN_VERDICT_HOST 0
#define STOREFN_VERDICT_OFFLOAD 1
#define STOREFN_OP_READ 1
#define STOREFN_OP_WRITE 2

/* Cache-table helpers; the item pointer is checked against the invocation's regions. */
/* 0 and *out filled, or -ENOENT. */
static long (*const storefn_table_lookup)(__u64 key, struct storefn_cache_item *out) = (void *)0x1100;
/* 0, -ENOSPC (full) or -ESTALE (a newer version is cached). */
static long (*const storefn_table_insert)(const struct storefn_cache_item *item) = (void *)0x1101;
/* 0, or -ENOENT. */
static long (*const storefn_table_delete)(__u64 key) = (void *)0x1102;

#endif
