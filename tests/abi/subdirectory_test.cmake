# Configures, builds and runs tests/abi/subdirectory (gpumem through add_subdirectory) in WORK_DIR,
# with cmocka hidden from find_package: a project embedding gpumem needs none of its test tools.
#   cmake -DSOURCE_DIR=<gpumem> -DWORK_DIR=<dir> -DGENERATOR=<gen> [-DMAKE_PROGRAM=<prog>] -P subdirectory_test.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR WORK_DIR GENERATOR)
  if("${${var}}" STREQUAL "")
    message(FATAL_ERROR "subdirectory_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run what)
  list(JOIN ARGN " " line)
  message(STATUS "${what}: ${line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n  ${line}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(configure cmake -S ${SOURCE_DIR}/tests/abi/subdirectory -B ${WORK_DIR} -G ${GENERATOR}
    -DGPUMEM_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_DISABLE_FIND_PACKAGE_cmocka=ON
    # Unoptimised and without the nvcc kernels: the point is the configuration, not the code.
    -DCMAKE_BUILD_TYPE= -DGPUMEM_COPY_KERNELS=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
run("configure" ${configure})
run("build" cmake --build ${WORK_DIR})
run("run" ${WORK_DIR}/consumer)
if(NOT last_output MATCHES "consumer: ok")
  message(FATAL_ERROR "the consumer did not say \"consumer: ok\":\n${last_output}")
endif()
message(STATUS "${last_output}")
