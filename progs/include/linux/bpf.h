/* storefn: <linux/bpf.h> as an XRP kernel would provide it.
 *
 * Stock kernels lack `struct bpf_xrp`; XRP programs include <linux/bpf.h> and expect it there.
 * This header wraps the system one (include_next) and adds the XRP context with the exact
 * x86-64 layout compiled XRP programs bake in: data@0, done@8, next_addr@16, size@144,
 * scratch@272, 280 bytes, then storefn's data_len@280 (288 bytes in all; docs/FORMAT.md,
 * "XRP context"). XRP's programs never read past 280, so they run unmodified.
 */
#ifndef STOREFN_LINUX_BPF_H
#define STOREFN_LINUX_BPF_H

#include_next <linux/bpf.h>
#include <linux/types.h>

#ifndef XRP_MAX_FANOUT
#define XRP_MAX_FANOUT 16
#endif

struct bpf_xrp {
	char *data;                         /* the block just read (read-only window) */
	__s32 done;                         /* set to 1 to return to the application */
	__u32 slot;                         /* storefn: fan-out slot whose read completed (in XRP's padding) */
	__u64 next_addr[XRP_MAX_FANOUT];    /* logical file offsets to read next */
	__u64 size[XRP_MAX_FANOUT];         /* 0 = no I/O in that slot */
	char *scratch;                      /* application-owned scratch (arguments, results) */
	__u64 data_len;                     /* storefn: bytes `data` holds (read-only) */
};

#endif
