/* canzona-bench's single-process modes: `ns`, the single-GPU Newton-Schulz micro-benchmark
 * (ns_bench.c), and `coll` (coll_bench.c). */
#ifndef CZ_NS_BENCH_H
#define CZ_NS_BENCH_H

/* argv[0] is "ns"; returns the process exit status. */
int cz_bench_ns_main(int argc, char **argv);
/* `canzona-bench coll` (coll_bench.c): the model's time of a step's DP collectives, rooted,
 * padded and by the rule. argv[0] is "coll". */
int cz_bench_coll_main(int argc, char **argv);

/* `canzona-bench calibrate` (calibrate.c): the GPU's measured rates for the cost model, as a
 * canzona.calibration/1 file. argv[0] is "calibrate"; exits 77 when no GPU can be used. */
int cz_bench_calibrate_main(int argc, char **argv);

#endif
