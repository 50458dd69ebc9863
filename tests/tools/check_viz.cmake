# Runs `gpumem viz` on the test trace (make_trace.c) and checks the page's structure: the summary,
# the timeline with both series, and the segment map at the peak, where the pool holds the ten
# 1 MiB segments it cached (free) and the eleven of 1.5 MiB in use; and that it loads nothing.
# usage: cmake -DTOOL=... -DTRACE=... -DPAGE=... -P check_viz.cmake
execute_process(COMMAND ${TOOL} viz ${TRACE} -o ${PAGE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpumem viz failed (${rc}): ${out}${err}")
endif()
file(READ ${PAGE} page)
foreach(want
    "<!DOCTYPE html>"
    "<th>peak live</th><td>16.50 MiB</td>"
    "<th>peak reserved</th><td>26.50 MiB</td>"
    "<th>reserved / live</th><td>1.6061</td>"
    "<svg id=\"timeline\""
    "<polyline class=\"reserved\" points=\""
    "<polyline class=\"live\" points=\""
    "<svg id=\"segments\"")
  string(FIND "${page}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the page lacks: ${want}")
  endif()
endforeach()
string(REGEX MATCHALL "<rect class=\"free\"" free "${page}")
string(REGEX MATCHALL "<rect class=\"used\"" used "${page}")
string(REGEX MATCHALL "<rect class=\"segment\"" segments "${page}")
list(LENGTH free nfree)
list(LENGTH used nused)
list(LENGTH segments nsegments)
if(NOT nfree EQUAL 10 OR NOT nused EQUAL 11 OR NOT nsegments EQUAL 21)
  message(FATAL_ERROR "expected 10 free and 11 used blocks in 21 segments, found ${nfree}, ${nused}, ${nsegments}")
endif()
if(page MATCHES "http[s]?://[^\"]*\\.(js|css)" OR page MATCHES "<script src")
  message(FATAL_ERROR "the page loads something from the network")
endif()
message(STATUS "viz page structure: ok")
