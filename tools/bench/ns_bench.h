/* `canzona-bench ns`: the single-GPU Newton-Schulz micro-benchmark (ns_bench.c). */
#ifndef CZ_NS_BENCH_H
#define CZ_NS_BENCH_H

/* argv[0] is "ns"; returns the process exit status. */
int cz_bench_ns_main(int argc, char **argv);

#endif
