/* BPF-KV's own scratch layouts, so programs written for BPF-KV (XRP's get.c, range.c) run
 * unmodified: `struct ScatterGatherQuery` (point lookups, up to 32 keys per chain) and
 * `struct RangeQuery` (resumable range scans). Written here from the published layouts, byte
 * for byte on x86-64 / BPF (LP64): docs/FORMAT.md, "BPF-KV scatter-gather scratch ABI" and
 * "BPF-KV range scratch ABI". crates/storefn-kv/tests/abi_doc.rs checks these numbers against
 * the Rust constants (storefn_kv::layout::abi) and the document.
 */
#ifndef STOREFN_BPFKV_ABI_H
#define STOREFN_BPFKV_ABI_H

#include "bpfkv.h"

/* ---- ScatterGatherQuery ---- */
#define BPFKV_SG_KEYS 32
#define BPFKV_SG_OFF_KEYS 32
#define BPFKV_SG_OFF_VALUES 288
#define BPFKV_SG_BYTES 2368
/* state_flags bit our bpfkv_get sets when the lookup ended at a value block read. */
#define BPFKV_SG_AT_VALUE 1
/* state_flags bit our programs set on an inconsistent node (the application falls back). */
#define BPFKV_SG_FAILED 0x80000000

struct bpfkv_maybe_value {
	__u8 found;
	__u8 value[BPFKV_VALUE_BYTES];
};

struct bpfkv_sg_query {
	__u64 root_pointer;   /* where every key's descent starts (file offset of a node) */
	__u64 value_ptr;      /* program state */
	__u32 state_flags;    /* program state */
	__s32 current_index;  /* program state: the key being looked up */
	__s32 n_keys;         /* keys[0..n_keys) are asked for */
	__u32 pad;
	__u64 keys[BPFKV_SG_KEYS];
	struct bpfkv_maybe_value values[BPFKV_SG_KEYS];
};

/* ---- RangeQuery ---- */
#define BPFKV_RQ_KEYS 32
#define BPFKV_RQ_BEGIN_EXCLUSIVE 1
#define BPFKV_RQ_END_INCLUSIVE 2
#define BPFKV_RQ_RESUME 1
#define BPFKV_RQ_TRAVERSE 2
#define BPFKV_RQ_READ_VALUE 3
#define BPFKV_RQ_READ_NODE 4
/* state our bpfkv_range leaves on an inconsistent node (not one of BPF-KV's states). */
#define BPFKV_RQ_FAILED 0x80000000
#define BPFKV_RQ_AGG_NONE 0
#define BPFKV_RQ_AGG_SUM 1
#define BPFKV_RQ_OFF_KV 32
#define BPFKV_RQ_OFF_AGG_VALUE 2336
#define BPFKV_RQ_OFF_STATE 2344
#define BPFKV_RQ_OFF_CURRENT_NODE 2368
#define BPFKV_RQ_BYTES 2880

struct bpfkv_key_value {
	__u64 key;
	__u8 value[BPFKV_VALUE_BYTES];
};

struct bpfkv_range_query {
	__u64 range_begin;
	__u64 range_end;
	__u32 flags;
	__u32 agg_op;
	__s32 len;            /* entries in kv[] produced by this call */
	__u32 pad0;
	struct bpfkv_key_value kv[BPFKV_RQ_KEYS];
	__s64 agg_value;
	__u32 state;          /* BPFKV_RQ_* state of the program */
	__u32 pad1;
	__u64 resume_from_leaf; /* where the next call's chain starts */
	__u32 node_key_ix;
	__u32 pad2;
	struct bpfkv_node512 current_node;
};

_Static_assert(sizeof(struct bpfkv_maybe_value) == 65, "MaybeValue");
_Static_assert(__builtin_offsetof(struct bpfkv_sg_query, keys) == BPFKV_SG_OFF_KEYS, "keys");
_Static_assert(__builtin_offsetof(struct bpfkv_sg_query, values) == BPFKV_SG_OFF_VALUES, "values");
_Static_assert(sizeof(struct bpfkv_sg_query) == BPFKV_SG_BYTES, "ScatterGatherQuery");
_Static_assert(__builtin_offsetof(struct bpfkv_range_query, kv) == BPFKV_RQ_OFF_KV, "kv");
_Static_assert(__builtin_offsetof(struct bpfkv_range_query, agg_value) == BPFKV_RQ_OFF_AGG_VALUE,
	       "agg_value");
_Static_assert(__builtin_offsetof(struct bpfkv_range_query, state) == BPFKV_RQ_OFF_STATE, "state");
_Static_assert(__builtin_offsetof(struct bpfkv_range_query, current_node) ==
		       BPFKV_RQ_OFF_CURRENT_NODE,
	       "current_node");
_Static_assert(sizeof(struct bpfkv_range_query) == BPFKV_RQ_BYTES, "RangeQuery");

/* Asks for the 512 B node (or value block) at `off` on fan-out pair 0. */
static __always_inline __u32 bpfkv_read_node(struct bpf_xrp *ctx, __u64 off)
{
	ctx->next_addr[0] = off;
	ctx->size[0] = 512;
	return 0;
}

/* The child of internal node `n` for `key` (BPF-KV's rule); 0 when the pointer lacks bit 63. */
static __always_inline __u64 bpfkv_child(struct bpfkv_node512 *n, __u64 key)
{
	__u64 p = n->ptr[30];
	for (int i = 1; i < 31; i++) {
		if (key < n->key[i]) {
			p = n->ptr[i - 1];
			break;
		}
	}
	return (p & BPFKV_FILE_MASK) ? (p & ~BPFKV_FILE_MASK) : 0;
}

#endif
