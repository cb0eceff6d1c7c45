/* storefn λ workloads: the layouts their inputs and outputs share with the native baselines
 * (crates/storefn-lambda/src/workloads.rs; a test there checks every #define below against the
 * Rust constant of the same name, and docs/DESIGN.md, "λ-IO", describes them). */
#ifndef STOREFN_LAMBDA_H
#define STOREFN_LAMBDA_H

#include <storefn.h>

/* stats64 / stats32: min, max, sum (wrapping) and count over a column of u64 / u32 values.
 * An empty input gives min = all ones, max = 0. */
struct stats_out {
	__u64 min;
	__u64 max;
	__u64 sum;
	__u64 count;
};
#define STATS_OUT_BYTES 32

/* knn: rows of KNN_ROW_BYTES = u64 id + KNN_FEATURES s64 features in [0, KNN_FEATURE_MAX).
 * The query is feature j = (j * KNN_QUERY_MUL mod 2^32) mod KNN_FEATURE_MAX. Output: u64
 * count, then KNN_K (dist, id) pairs ascending by (dist, id); unfilled pairs are zero. */
#define KNN_ROW_BYTES 2048
#define KNN_FEATURES 255
#define KNN_K 8
#define KNN_FEATURE_MAX 1024
#define KNN_QUERY_MUL 2654435761u
#define KNN_OUT_BYTES (8 + 16 * KNN_K)

/* grep: rows of GREP_ROW_BYTES bytes of text; a row matches if it contains GREP_NEEDLE.
 * Output: u64 rows scanned, u64 matching rows, then the u32 index (within the input) of the
 * first GREP_MAX_HITS matching rows. Returns 16 + 4 * min(matches, GREP_MAX_HITS). */
#define GREP_ROW_BYTES 4096
#define GREP_NEEDLE "storefn!"
#define GREP_NEEDLE_BYTES 8
#define GREP_MAX_HITS 256
#define GREP_OUT_MAX_BYTES (16 + 4 * GREP_MAX_HITS)

/* bitmap (write path): input = u16 run lengths in bits, alternating 0-runs and 1-runs, the
 * first a 0-run; output = the bits packed LSB first, ceil(bits / 8) bytes (the last byte's
 * unused high bits zero). Generated runs average BITMAP_MEAN_RUN bits: ~32x expansion. */
#define BITMAP_MEAN_RUN 512

/* tpch q6 over a columnar lineitem file: groups of Q6_GROUP_ROWS rows, each group the columns
 * l_shipdate (s32, days since 1992-01-01), l_discount (s32, hundredths), l_quantity (s32),
 * l_extendedprice (s64, cents), one after another. A row qualifies when
 * Q6_DATE_LO <= shipdate < Q6_DATE_HI, Q6_DISC_LO <= discount <= Q6_DISC_HI and quantity <
 * Q6_QTY_LT. Output: u64 sum(price * discount), u64 qualifying rows, u64 rows scanned. Only
 * whole groups of the input are read. */
#define Q6_GROUP_ROWS 2048
#define Q6_GROUP_BYTES (Q6_GROUP_ROWS * 20)
#define Q6_DATE_LO 731
#define Q6_DATE_HI 1096
#define Q6_DISC_LO 5
#define Q6_DISC_HI 7
#define Q6_QTY_LT 24
#define Q6_OUT_BYTES 24

#endif
