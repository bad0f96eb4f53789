/* The backends this build has: a model loads with one of them (tubelet_load_params.device), and
 * a new backend (a GPU's table) joins this list, nothing under models/. */
#include <string.h>

#include "backend.h"
#include "gemm.h"

static const tb_kernels *const backends[] = {
    &tb_cpu_kernels,
#ifdef TUBELET_CUDA
    &tb_cuda_kernels,
#endif
};

const tb_kernels *tb_backend_at(int i) {
    return i >= 0 && i < (int)(sizeof backends / sizeof *backends) ? backends[i] : NULL;
}

const tb_kernels *tb_backend_find(const char *name) {
    if (!name || !*name) name = "cpu";
    for (int i = 0; tb_backend_at(i); i++)
        if (!strcmp(tb_backend_at(i)->name, name)) return tb_backend_at(i);
    return NULL;
}

/* The CPU's GEMM library (tubelet.h), a property of the build rather than of a model. */
const char *tubelet_gemm_backend(void) { return tb_gemm_backend(); }
