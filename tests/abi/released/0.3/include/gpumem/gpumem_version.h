/**
 * @file gpumem_version.h
 * @brief The version of the gpumem headers, fixed when the library was built.
 *
 * Compare with gpumem_version_number() to learn which library was loaded.
 */
#ifndef GPUMEM_VERSION_H
#define GPUMEM_VERSION_H

/** @brief Major version: changes when the ABI breaks (never from 1.0 on). */
#define GPUMEM_VERSION_MAJOR 0
/** @brief Minor version: changes when the ABI grows. */
#define GPUMEM_VERSION_MINOR 3
/** @brief Patch version: fixes only. */
#define GPUMEM_VERSION_PATCH 0
/** @brief The version as one number: major * 10000 + minor * 100 + patch. */
#define GPUMEM_VERSION_NUMBER (GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH)
/** @brief The version as "MAJOR.MINOR.PATCH". */
#define GPUMEM_VERSION_STRING "0.3.0"

#endif /* GPUMEM_VERSION_H */
