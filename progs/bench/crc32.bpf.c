/* Checksum with byte loads and a bit loop: CRC-32 (reflected, 0xEDB88320) of the first 256
 * bytes, the argument's low 32 bits as the initial value. */
#include "bench.h"

BENCH(crc32)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u32 crc = ~(__u32)bench_arg(ctx);

	for (int i = 0; i < 256; i++) {
		crc ^= d[i];
		for (int b = 0; b < 8; b++)
			crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
	}
	return bench_ret(ctx, ~crc);
}
