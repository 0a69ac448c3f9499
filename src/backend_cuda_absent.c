/* Built instead of backend_cuda.c when configure found no cuda.h. */
#include "backend.h"
#include "status.h"

coop_status coop_backend_cuda_create(int device, bool want_vmm, coop_backend **out)
{
    (void)device;
    (void)want_vmm;
    *out = NULL;
    return coop_set_error(COOP_ERR_UNSUPPORTED,
                          "cuda backend: built without CUDA (configure found no cuda.h; "
                          "rebuild with --with-cuda=DIR)");
}
