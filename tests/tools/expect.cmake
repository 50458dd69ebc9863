# Runs a command and checks what its user sees: the exit status and what it printed (stdout and
# stderr together). PASS_REGULAR_EXPRESSION alone would pass a command that printed the right line
# and then crashed or exited 0 on a refusal.
# usage: cmake -DSTATUS=N -DOUTPUT=REGEX [-DTIMEOUT=SECONDS] -P expect.cmake -- COMMAND [ARG...]
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
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out
                TIMEOUT ${TIMEOUT})
if(NOT "${status}" STREQUAL "${STATUS}")
  message(FATAL_ERROR "exit status ${status}, expected ${STATUS}; it printed:\n${out}")
endif()
if(NOT out MATCHES "${OUTPUT}")
  message(FATAL_ERROR "the output does not match \"${OUTPUT}\":\n${out}")
endif()
message(STATUS "exit status ${status}, and:\n${out}")
