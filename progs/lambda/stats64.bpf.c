/* λ workload stats64: min / max / sum / count over a column of u64 values (storefn_lambda.h). */
#define STATS_T __u64
#define STATS_FN stats64
#include <storefn_lambda_stats.h>
