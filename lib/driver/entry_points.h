/* The driver entry points gpumem uses. C as well as C++, so that the tests' fake driver serves
 * exactly this list. */
#ifndef GPUMEM_DRIVER_ENTRY_POINTS_H
#define GPUMEM_DRIVER_ENTRY_POINTS_H

/* Each entry point with the version of its signature; cuGetProcAddress is asked for exactly that
 * version, so the pointer matches the typedef whatever driver is installed. */
#define GPUMEM_DRIVER_ENTRY_POINTS(X)                  \
  X(cuInit, 2000)                                      \
  X(cuDriverGetVersion, 2020)                          \
  X(cuGetErrorName, 6000)                              \
  X(cuGetErrorString, 6000)                            \
  X(cuDeviceGetCount, 2000)                            \
  X(cuDeviceGet, 2000)                                 \
  X(cuDeviceGetName, 2000)                             \
  X(cuDeviceTotalMem, 3020)                            \
  X(cuDeviceGetAttribute, 2000)                        \
  X(cuDevicePrimaryCtxRetain, 7000)                    \
  X(cuCtxGetCurrent, 4000)                             \
  X(cuCtxPushCurrent, 4000)                            \
  X(cuCtxPopCurrent, 4000)                             \
  X(cuCtxGetDevice, 2000)                              \
  X(cuStreamGetCtx, 9020)                              \
  X(cuStreamSynchronize, 2000)                         \
  X(cuMemGetInfo, 3020)                                \
  X(cuMemAlloc, 3020)                                  \
  X(cuMemFree, 3020)                                   \
  X(cuMemAllocAsync, 11020)                            \
  X(cuMemAllocFromPoolAsync, 11020)                    \
  X(cuMemFreeAsync, 11020)                             \
  X(cuMemPoolCreate, 11020)                            \
  X(cuMemPoolDestroy, 11020)                           \
  X(cuMemPoolSetAttribute, 11020)                      \
  X(cuMemPoolGetAttribute, 11020)                      \
  X(cuMemPoolTrimTo, 11020)                            \
  X(cuMemPoolSetAccess, 11020)                         \
  X(cuMemPoolGetAccess, 11020)                         \
  X(cuDeviceGetDefaultMemPool, 11020)                  \
  X(cuDeviceGetMemPool, 11020)                         \
  X(cuMemAddressReserve, 10020)                        \
  X(cuMemAddressFree, 10020)                           \
  X(cuMemCreate, 10020)                                \
  X(cuMemRelease, 10020)                               \
  X(cuMemMap, 10020)                                   \
  X(cuMemUnmap, 10020)                                 \
  X(cuMemSetAccess, 10020)                             \
  X(cuMemGetAllocationGranularity, 10020)              \
  X(cuMemRetainAllocationHandle, 11000)                \
  X(cuMemExportToShareableHandle, 10020)               \
  X(cuMemImportFromShareableHandle, 10020)             \
  X(cuIpcGetMemHandle, 4010)                           \
  X(cuIpcOpenMemHandle, 11000)                         \
  X(cuIpcCloseMemHandle, 4010)                         \
  X(cuDeviceGetUuid, 11040)                            \
  X(cuCtxSynchronize, 2000)                            \
  X(cuMemHostAlloc, 2020)                              \
  X(cuMemFreeHost, 2000)                               \
  X(cuMemHostRegister, 6050)                           \
  X(cuMemHostUnregister, 4000)                         \
  X(cuMemHostGetDevicePointer, 3020)                   \
  X(cuMemAllocManaged, 6000)                           \
  X(cuMemPrefetchAsync, 12020)                         \
  X(cuMemAdvise, 12020)                                \
  X(cuMemRangeGetAttributes, 8000)                     \
  X(cuPointerGetAttributes, 7000)                      \
  X(cuMemsetD8, 3020)                                  \
  X(cuMemsetD16, 3020)                                 \
  X(cuMemsetD32, 3020)                                 \
  X(cuMemsetD8Async, 3020)                             \
  X(cuMemsetD16Async, 3020)                            \
  X(cuMemsetD32Async, 3020)                            \
  X(cuMemcpy, 4000)                                    \
  X(cuMemcpyAsync, 4000)                               \
  X(cuMemcpy3D, 3020)                                  \
  X(cuMemcpy3DAsync, 3020)                             \
  X(cuMemcpy3DPeer, 4000)                              \
  X(cuMemcpy3DPeerAsync, 4000)                         \
  X(cuDeviceCanAccessPeer, 4000)                       \
  X(cuCtxEnablePeerAccess, 4000)                       \
  X(cuStreamIsCapturing, 10000)                        \
  X(cuThreadExchangeStreamCaptureMode, 10010)          \
  X(cuEventCreate, 2000)                               \
  X(cuEventRecord, 2000)                               \
  X(cuEventSynchronize, 2000)                          \
  X(cuEventQuery, 2000)                                \
  X(cuStreamWaitEvent, 3020)                           \
  X(cuEventDestroy, 4000)                              \
  X(cuModuleLoadData, 2000)                            \
  X(cuModuleGetFunction, 2000)                         \
  X(cuModuleUnload, 2000)                              \
  X(cuLaunchKernel, 4000)                              \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050) \
  X(cuArray3DCreate, 3020)                             \
  X(cuArray3DGetDescriptor, 3020)                      \
  X(cuArrayDestroy, 2000)

#endif /* GPUMEM_DRIVER_ENTRY_POINTS_H */
