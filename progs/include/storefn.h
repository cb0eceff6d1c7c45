/* storefn: shared definitions for storage functions written for storefn. */
#ifndef STOREFN_H
#define STOREFN_H

#include <linux/bpf.h>
#include <linux/types.h>

/* λ-IO program context: run over an input buffer, write an output buffer, return output bytes. */
struct context {
	void *buf_o;
	void *buf_i;
	__u64 size_i;
};

/* storefn helpers for λ programs (ids from STOREFN_HELPER_BASE = 0x1000; crates/storefn-vm/src/
 * helpers.rs). Every pointer argument is checked against the invocation's regions: a range
 * outside them aborts the invocation like a bad load or store. */
/* Copies n bytes (ranges may overlap); returns 0. */
static long (*const storefn_memcpy)(void *dst, const void *src, __u64 n) = (void *)0x1000;
/* Sets n bytes to (unsigned char)c; returns 0. */
static long (*const storefn_memset)(void *dst, int c, __u64 n) = (void *)0x1001;
/* Compares n bytes: -1, 0 or 1. */
static long (*const storefn_memcmp)(const void *a, const void *b, __u64 n) = (void *)0x1002;
/* For every program type: the CRC-32C of crc's data followed by [p, p+n) (0 to start; results
 * chain as zlib's crc32 does). Charged one instruction per 8 bytes. */
static __u32 (*const storefn_crc32c)(__u32 crc, const void *p, __u64 n) = (void *)0x1003;

/* The index (0-7) of the lowest nonzero byte of x, x != 0: where two little-endian words
 * loaded from the same place first differ (x = a ^ b). A binary search of three steps:
 * unrolled byte loops cost a compare per byte and many more instruction slots. */
static __attribute__((always_inline)) inline __u32 storefn_low_byte(__u64 x)
{
	__u32 i = 0;
	if (!(x & 0xffffffffULL)) {
		i += 4;
		x >>= 32;
	}
	if (!(x & 0xffff)) {
		i += 2;
		x >>= 16;
	}
	if (!(x & 0xff))
		i += 1;
	return i;
}

#endif
