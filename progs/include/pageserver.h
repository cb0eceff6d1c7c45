/* The page server of DDS's paper (Azure SQL Hyperscale's GetPage), as storefn's example.
 * Pages are PS_PAGE_BYTES at page_id * PS_PAGE_BYTES of one file; a page's first 8 bytes are
 * its LSN (little-endian). A GetPage batch: __u32 count, __u32 pad, then count index entries
 * (struct ps_batch_entry: where each message is and how long), then the messages. */
#ifndef PAGESERVER_H
#define PAGESERVER_H

#include <linux/types.h>

#define PS_PAGE_BYTES 8192
#define PS_MAX_BATCH 64
#define PS_BATCH_HEADER 8

struct ps_batch_entry {
	__u32 offset; /* from the batch's first byte */
	__u32 len;    /* a GetPage is sizeof(struct ps_get_page); any other length is no GetPage */
};

struct ps_get_page {
	__u64 page;
	__u64 lsn; /* the page must be at least this new */
};

#endif
