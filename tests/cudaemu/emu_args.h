/* cudaemu: the pointers inside the kernels' struct arguments, checked as the plain pointer
 * arguments are (cuda_runtime.h's tb_emu::check_arg, found by argument-dependent lookup).
 * make CUDA=emu force-includes this file before src/kernels/cuda/kernels.cu. */
#include "cuda_runtime.h"
#include "kernels/cuda/cuda.h"

static inline void check_arg(const tb_grouping &g, const char *k, int i) {
    tb_emu::check_pointer(g.rows, k, i), tb_emu::check_pointer(g.start, k, i);
}
static inline void check_arg(const tb_attn_bias &b, const char *k, int i) {
    tb_emu::check_pointer(b.bias, k, i), tb_emu::check_pointer(b.mask, k, i);
    tb_emu::check_pointer(b.mask_index, k, i), tb_emu::check_pointer(b.dbias, k, i);
}
