/* λ workload stats32: min / max / sum / count over a column of u32 values (storefn_lambda.h). */
#define STATS_T __u32
#define STATS_FN stats32
#include <storefn_lambda_stats.h>
