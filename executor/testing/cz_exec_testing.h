/*
 * cz_exec_testing.h — the executor's insides, for what tests it from outside executor/ and for
 * nothing else: the white-box tests (tests/exec, tests/gpu, tests/mpi's references,
 * tests/unit's device model), the fuzzers and canzona-bench, which times the backends' kernels
 * directly. Their CMake targets link canzona_exec_internals, which puts this folder and the
 * executor's own on the include path; the lint (rule `layers`) refuses any other executor
 * header outside executor/. A job includes canzona_exec.h only. The MPI watchdog, which needs
 * <mpi.h>, is in cz_exec_testing_mpi.h.
 */
#ifndef CZ_EXEC_TESTING_H
#define CZ_EXEC_TESTING_H

#include "alloc.h"
#include "clock.h"
#include "shard.h"
#include "fsdp_shard.h"
#include "compute.h"
#include "compute_cpu.h"
#include "elementwise.h"
#include "launch.h"
#include "ns_plan.h"
#include "linalg_plan.h"
#include "gpu_plugin.h"
#include "comm.h"
#include "comm_self.h"
#include "comm_callbacks.h"
#include "comm_mpi.h"
#include "nccl_plan.h"
#include "optimizer.h"
#include "adamw.h"
#include "muon.h"
#include "soap.h"
#include "shampoo.h"
#include "cz_format.h"
#include "ns_coop.h"
#include "ns_workload.h"
#include "executor_impl.h"
#include "bucket_step.h"
#include "config.h"
#include "step_bytes.h"
#include "memory_model.h"

#endif /* CZ_EXEC_TESTING_H */
