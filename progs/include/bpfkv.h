/* BPF-KV structures shared by the storefn-kv storage functions (docs/FORMAT.md, "BPF-KV").
 * Offsets here are checked against the Rust constants by crates/storefn-kv/tests/format_doc.rs.
 */
#ifndef STOREFN_BPFKV_H
#define STOREFN_BPFKV_H

#include <linux/bpf.h>
#include <linux/types.h>

#define BPFKV_FILE_MASK 0x8000000000000000ULL
#define BPFKV_NODE_INTERNAL 0
#define BPFKV_NODE_LEAF 1
#define BPFKV_VALUE_BYTES 64
/* Chains deeper than this are corrupt (a 2^64-key tree of fan-out 31 has 13 levels). */
#define BPFKV_MAX_HOPS 16

/* ---- point lookup scratch: key@0, found@8, value@9, private state@128 ---- */
#define BPFKV_LOOKUP_OFF_STATE 128
#define BPFKV_PHASE_NODE 0
#define BPFKV_PHASE_VALUE 1

struct bpfkv_lookup_scratch {
	__u64 key;
	__u8 found;
	__u8 value[BPFKV_VALUE_BYTES];
	__u8 reserved[BPFKV_LOOKUP_OFF_STATE - 73];
	/* private state (zeroed by the application before each call) */
	__u64 phase;
	__u64 value_off;
	__u64 hops;
	__u64 err;
};

/* ---- range scratch (512 B nodes) ---- */
#define BPFKV_RANGE_BATCH 32
#define BPFKV_RANGE_FLAG_DONE 1
#define BPFKV_RANGE_FLAG_RESUME 2
#define BPFKV_RANGE_OFF_LEAF_COPY 2368
#define BPFKV_RANGE_OFF_PHASE 2880
#define BPFKV_AGG_NONE 0
#define BPFKV_AGG_SUM 1
#define BPFKV_AGG_MIN 2
#define BPFKV_AGG_MAX 3
#define BPFKV_AGG_COUNT 4

struct bpfkv_node512 {
	__u64 next;
	__u64 type;
	__u64 key[31];
	__u64 ptr[31];
};

struct bpfkv_node4096 {
	__u64 next;
	__u64 type;
	__u64 key[255];
	__u64 ptr[255];
};

struct bpfkv_range_result {
	__u64 key;
	__u8 value[BPFKV_VALUE_BYTES];
};

struct bpfkv_range_scratch {
	__u64 begin;
	__u64 end;
	__u32 agg;
	__u32 flags;
	__u64 leaf;
	__u32 index;
	__u32 count;
	__u64 agg_value;
	__u64 agg_n;
	__u64 reserved;
	struct bpfkv_range_result results[BPFKV_RANGE_BATCH];
	struct bpfkv_node512 leaf_copy;
	/* private */
	__u32 phase;
	__u32 err;
	__u64 pending_key;
	__u64 pending_off;
};

_Static_assert(sizeof(struct bpfkv_node512) == 512, "512 B node");
_Static_assert(sizeof(struct bpfkv_node4096) == 4096, "4096 B node");
_Static_assert(__builtin_offsetof(struct bpfkv_lookup_scratch, phase) == BPFKV_LOOKUP_OFF_STATE,
	       "lookup state offset");
_Static_assert(__builtin_offsetof(struct bpfkv_range_scratch, results) == 64, "results");
_Static_assert(__builtin_offsetof(struct bpfkv_range_scratch, leaf_copy) ==
		       BPFKV_RANGE_OFF_LEAF_COPY,
	       "leaf copy");
_Static_assert(__builtin_offsetof(struct bpfkv_range_scratch, phase) == BPFKV_RANGE_OFF_PHASE,
	       "phase");
_Static_assert(sizeof(struct bpfkv_range_scratch) <= 4096, "fits the scratch");

#endif
