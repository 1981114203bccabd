/* The JSON harnesses' libFuzzer mutator: the structure-aware edits of fuzz_json_mutator.c,
 * which the safetensors harness shares without this entry point (it has its own). */
#include "fuzz_util.h"

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed);
}
