// Versions and errors at the C boundary.
#include "capi/guard.hpp"

extern "C" {

GPUMEM_API uint32_t gpumem_version_number(void) { return GPUMEM_VERSION_NUMBER; }

GPUMEM_API const char* gpumem_version_string(void) { return GPUMEM_VERSION_STRING; }

GPUMEM_API const char* gpumem_status_name(gpumem_status_t status) { return gpumem::status_name(status); }

GPUMEM_API const char* gpumem_status_string(gpumem_status_t status) { return gpumem::status_message(status); }

GPUMEM_API const char* gpumem_last_error_detail(void) { return gpumem::last_error_detail(); }

GPUMEM_API int32_t gpumem_last_cuda_result(void) { return gpumem::last_cuda_result(); }

}  // extern "C"
