# The installed tree as its users meet it. Run by CTest in three modes, each a test of its own:
#   cmake -DMODE=install   ... -P install_test.cmake   clean WORK_DIR, `cmake --install` into PREFIX, check the files
#   cmake -DMODE=cmake     ... -P install_test.cmake   build tests/abi/consumer with find_package(gpumem), run it
#   cmake -DMODE=pkgconfig ... -P install_test.cmake   compile consumer/main.c with `pkg-config --cflags --libs`, run it
# The other -D variables come from tests/abi/CMakeLists.txt. A missing tool prints
# GPUMEM-ABI-TEST-SKIPPED, which the tests' SKIP_REGULAR_EXPRESSION turns into a skip.
cmake_minimum_required(VERSION 3.25)

foreach(var MODE BUILD_DIR WORK_DIR PREFIX LIBDIR INCLUDEDIR BINDIR VERSION SOVERSION SOURCE_INCLUDE_DIR
            CONSUMER_DIR C_COMPILER)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(skip why)
  message(FATAL_ERROR "GPUMEM-ABI-TEST-SKIPPED: ${why}")
endfunction()

# Runs a command; on failure stops with the command line and everything it printed.
function(run what)
  cmake_parse_arguments(R "" "OUTPUT_VARIABLE" "COMMAND" ${ARGN})
  list(JOIN R_COMMAND " " line)
  message(STATUS "${what}: ${line}")
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n  ${line}\n${out}")
  endif()
  if(R_OUTPUT_VARIABLE)
    set(${R_OUTPUT_VARIABLE} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(require_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "the install lacks ${path}")
  endif()
endfunction()

# Anything printed by a consumer must show the version of this build and end in "consumer: ok".
function(check_consumer_output out)
  string(FIND "${out}" "gpumem ${VERSION} (headers ${VERSION})" at_version)
  string(FIND "${out}" "consumer: ok" at_ok)
  if(at_version EQUAL -1 OR at_ok EQUAL -1)
    message(FATAL_ERROR "the consumer did not report gpumem ${VERSION} and \"consumer: ok\"; it printed:\n${out}")
  endif()
  message(STATUS "the consumer printed:\n${out}")
endfunction()

set(libdir ${PREFIX}/${LIBDIR})
# The installed library, not the build tree's, must be the one a consumer loads; LD_LIBRARY_PATH is
# searched before a RUNPATH and may already name the build tree.
set(ENV{LD_LIBRARY_PATH} "${libdir}")

if(SANITIZE)
  # An instrumented library needs an instrumented program to load it (the sanitizer runtime must come
  # first), so consumers build with the flags the library was built with.
  set(sanitize_flags -fsanitize=${SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
else()
  set(sanitize_flags)
endif()

# The same C compiler as the build, unless this tree was copied to a machine that keeps it elsewhere.
if(EXISTS "${C_COMPILER}")
  set(cc "${C_COMPILER}")
else()
  find_program(cc NAMES cc gcc)
  if(NOT cc)
    skip("the build's C compiler ${C_COMPILER} is missing and there is no cc or gcc on PATH")
  endif()
  message(STATUS "the build's C compiler ${C_COMPILER} is missing; using ${cc}")
endif()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  run("install" COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")

  # Headers: exactly the public ones and the generated version header; nothing internal, no templates.
  file(GLOB source_headers RELATIVE "${SOURCE_INCLUDE_DIR}" "${SOURCE_INCLUDE_DIR}/*.h")
  set(expected_headers ${source_headers} gpumem_version.h)
  list(SORT expected_headers)
  file(GLOB installed_headers RELATIVE "${PREFIX}/${INCLUDEDIR}/gpumem" "${PREFIX}/${INCLUDEDIR}/gpumem/*")
  list(SORT installed_headers)
  if(NOT installed_headers STREQUAL expected_headers)
    message(FATAL_ERROR "installed ${PREFIX}/${INCLUDEDIR}/gpumem holds [${installed_headers}], "
                        "expected [${expected_headers}]")
  endif()
  file(STRINGS "${PREFIX}/${INCLUDEDIR}/gpumem/gpumem_version.h" version_line
       REGEX "^#define GPUMEM_VERSION_STRING \"${VERSION}\"$")
  if(NOT version_line)
    message(FATAL_ERROR "the installed gpumem_version.h does not define GPUMEM_VERSION_STRING \"${VERSION}\"")
  endif()

  # The library: the development link, the SONAME link and the real file. (abi_exports checks the
  # SONAME itself: CMake 3.25's file(READ_ELF) reads no SONAME from it.)
  foreach(name libgpumem.so libgpumem.so.${SOVERSION} libgpumem.so.${VERSION})
    require_file("${libdir}/${name}")
  endforeach()
  file(READ_ELF "${libdir}/libgpumem.so.${VERSION}" RUNPATH runpath RPATH rpath)

  # Package files, and no path into the build or source tree anywhere in them.
  set(package_files
    ${libdir}/cmake/gpumem/gpumem-config.cmake
    ${libdir}/cmake/gpumem/gpumem-config-version.cmake
    ${libdir}/cmake/gpumem/gpumem-targets.cmake
    ${libdir}/pkgconfig/gpumem.pc)
  get_filename_component(source_dir "${SOURCE_INCLUDE_DIR}/../.." ABSOLUTE)
  foreach(file IN LISTS package_files)
    require_file("${file}")
    file(READ "${file}" text)
    foreach(tree "${BUILD_DIR}" "${source_dir}")
      string(FIND "${text}" "${tree}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "${file} names ${tree}: the installed package points back into the build")
      endif()
    endforeach()
  endforeach()
  foreach(path IN LISTS runpath rpath)
    string(FIND "${path}" "${BUILD_DIR}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "the installed library's RPATH/RUNPATH '${path}' names the build tree")
    endif()
  endforeach()

  if(TOOL)
    require_file("${PREFIX}/${BINDIR}/gpumem")
    # As a user runs it: no LD_LIBRARY_PATH, so the tool's own run path must find the library.
    set(library_path "$ENV{LD_LIBRARY_PATH}")
    unset(ENV{LD_LIBRARY_PATH})
    run("installed tool" COMMAND "${PREFIX}/${BINDIR}/gpumem" version OUTPUT_VARIABLE out)
    set(ENV{LD_LIBRARY_PATH} "${library_path}")
    if(NOT out STREQUAL "${VERSION}\n")
      message(FATAL_ERROR "the installed `gpumem version` printed '${out}', expected '${VERSION}'")
    endif()
  endif()
  message(STATUS "installed into ${PREFIX}")

elseif(MODE STREQUAL "cmake")
  # The build's generator where its build tool is still here; otherwise whichever one is on PATH.
  if(GENERATOR AND MAKE_PROGRAM AND EXISTS "${MAKE_PROGRAM}")
    set(generator_args -G "${GENERATOR}" "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  else()
    find_program(make_program NAMES make gmake)
    find_program(ninja_program NAMES ninja ninja-build)
    if(ninja_program AND (GENERATOR MATCHES "Ninja" OR NOT make_program))
      set(generator_args -G Ninja "-DCMAKE_MAKE_PROGRAM=${ninja_program}")
    elseif(make_program)
      set(generator_args -G "Unix Makefiles" "-DCMAKE_MAKE_PROGRAM=${make_program}")
    else()
      skip("neither make nor ninja is on PATH to build the consumer project")
    endif()
  endif()
  list(JOIN sanitize_flags " " sanitize_string)
  set(build ${WORK_DIR}/consumer-cmake)
  file(REMOVE_RECURSE "${build}")
  run("configure the consumer" COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${build}" ${generator_args}
      "-DCMAKE_C_COMPILER=${cc}"
      -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_C_FLAGS=${sanitize_string}"
      "-DCMAKE_EXE_LINKER_FLAGS=${sanitize_string}"
      "-DCMAKE_PREFIX_PATH=${PREFIX}"
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
      -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
      "-DGPUMEM_EXPECTED_PREFIX=${PREFIX}")
  run("build the consumer" COMMAND "${CMAKE_COMMAND}" --build "${build}" --config Release)
  find_program(consumer NAMES consumer PATHS "${build}" "${build}/Release" NO_DEFAULT_PATH NO_CACHE)
  if(NOT consumer)
    message(FATAL_ERROR "the consumer build made no program in ${build}")
  endif()
  run("run the consumer" COMMAND "${consumer}" OUTPUT_VARIABLE out)
  check_consumer_output("${out}")

elseif(MODE STREQUAL "pkgconfig")
  find_program(pkg_config NAMES pkg-config pkgconf)
  if(NOT pkg_config)
    skip("pkg-config is not installed")
  endif()
  # Only the prefix: a gpumem.pc elsewhere on the machine must not answer instead.
  set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
  set(ENV{PKG_CONFIG_LIBDIR} "${libdir}/pkgconfig")
  run("pkg-config version" COMMAND "${pkg_config}" --modversion gpumem OUTPUT_VARIABLE modversion)
  string(STRIP "${modversion}" modversion)
  if(NOT modversion STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config --modversion gpumem says '${modversion}', expected '${VERSION}'")
  endif()
  # Checked before compiling so that a .pc written for another prefix says so, rather than as a
  # missing header or library.
  foreach(var includedir libdir)
    run("pkg-config ${var}" COMMAND "${pkg_config}" --variable=${var} gpumem OUTPUT_VARIABLE dir)
    string(STRIP "${dir}" dir)
    cmake_path(IS_PREFIX PREFIX "${dir}" NORMALIZE inside)
    if(NOT inside)
      message(FATAL_ERROR "the installed ${libdir}/pkgconfig/gpumem.pc gives ${var}=${dir}, outside the "
                          "prefix ${PREFIX} it was installed into: the .pc file is not relocated by "
                          "`cmake --install --prefix`")
    endif()
  endforeach()
  run("pkg-config flags" COMMAND "${pkg_config}" --cflags --libs gpumem OUTPUT_VARIABLE flags)
  string(STRIP "${flags}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(build ${WORK_DIR}/consumer-pkgconfig)
  file(REMOVE_RECURSE "${build}")
  file(MAKE_DIRECTORY "${build}")
  run("compile the consumer" COMMAND "${cc}" -std=c99 -pedantic -Wall -Wextra -Werror ${sanitize_flags}
      "${CONSUMER_DIR}/main.c" ${flags} -o "${build}/consumer")
  run("run the consumer" COMMAND "${build}/consumer" OUTPUT_VARIABLE out)
  check_consumer_output("${out}")

else()
  message(FATAL_ERROR "install_test.cmake: unknown MODE '${MODE}'")
endif()
