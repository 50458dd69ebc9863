/**
 * @file gpumem.h
 * @brief The whole gpumem API: include this one header.
 *
 * gpumem manages GPU memory of every kind behind a stable C ABI. See README.md and docs/ for a
 * tour; each area has its own header beside this one.
 */
#ifndef GPUMEM_H
#define GPUMEM_H

#include "allocator.h"
#include "array.h"
#include "copy.h"
#include "core.h"
#include "cuda_pool.h"
#include "cupy.h"
#include "device.h"
#include "ipc.h"
#include "memory.h"
#include "pin.h"
#include "pointer.h"
#include "pool.h"
#include "tenant.h"
#include "torch.h"
#include "trace.h"
#include "vm.h"

#endif /* GPUMEM_H */
