/* Built instead of backend_cuda.c when configure found no cuda.h or was given
 * --without-cuda. */
#include "backend.h"
#include "status.h"

coop_status coop_backend_cuda_create(int device, bool want_vmm, coop_backend **out)
{
    (void)device;
    (void)want_vmm;
    *out = NULL;
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "cuda backend: built without CUDA (configure was given "
                          "--without-cuda or found no cuda.h; rebuild with --with-cuda=DIR)");
}

void coop_backend_cuda_held_now(const coop_backend *be, coop_backend_cuda_held *out)
{
    (void)be;
    *out = (coop_backend_cuda_held){0};
}

int coop_backend_cuda_init_pid(void)
{
    return 0;
}
