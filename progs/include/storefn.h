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

#endif
