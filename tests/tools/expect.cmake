# Runs a command and checks what its user sees: the exit status and what it printed (stdout and
# stderr together). PASS_REGULAR_EXPRESSION alone would pass a command that printed the right line
# and then crashed or exited 0 on a refusal.
# With -DSTDOUT_ONLY=ON, REGEX is matched against stdout alone, and stderr must be empty.
# usage: cmake -DSTATUS=N -DOUTPUT=REGEX [-DTIMEOUT=SECONDS] [-DSTDOUT_ONLY=ON] -P expect.cmake -- COMMAND [ARG...]
set(command "")
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_dashes)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if(NOT DEFINED TIMEOUT)
  set(TIMEOUT 60)
endif()
if(STDOUT_ONLY)
  execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT ${TIMEOUT})
  if(NOT err STREQUAL "")
    message(FATAL_ERROR "it printed on stderr:\n${err}")
  endif()
else()
  execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out
                  TIMEOUT ${TIMEOUT})
endif()
if(NOT "${status}" STREQUAL "${STATUS}")
  message(FATAL_ERROR "exit status ${status}, expected ${STATUS}; it printed:\n${out}")
endif()
if(NOT out MATCHES "${OUTPUT}")
  message(FATAL_ERROR "the output does not match \"${OUTPUT}\":\n${out}")
endif()
message(STATUS "exit status ${status}, and:\n${out}")
