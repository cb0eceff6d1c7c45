/* Accept, then stop on the budget: the issue-10 worst case. No loop at all: seven non-recursive
 * functions, each calling the next 64 times (64^6 leaf calls, ~7e10), so only an instruction
 * budget that charges calls and straight-line code stops it. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define X4(e) e; e; e; e
#define X16(e) X4(X4(e))
#define X64(e) X4(X16(e))

static __attribute__((noinline)) __u64 f6(__u64 x)
{
	return x + 1;
}

#define LEVEL(name, next)                                                                    \
	static __attribute__((noinline)) __u64 name(__u64 x)                                  \
	{                                                                                      \
		X64(x = next(x));                                                              \
		return x;                                                                      \
	}

LEVEL(f5, f6)
LEVEL(f4, f5)
LEVEL(f3, f4)
LEVEL(f2, f3)
LEVEL(f1, f2)

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 x = 0;
	X64(x = f1(x));
	ctx->done = 1;
	return (__u32)x;
}

char LICENSE[] SEC("license") = "GPL";
