# Runs `gpumem viz` on the test trace (make_trace.c) through a pool and the device, and checks the
# page without a browser: the summary table, read without the script; the data the script draws
# from, read as JSON (string(JSON) fails on anything malformed): every allocation a band with its
# records, times, size and stream, each configuration's peaks, and the segment map at the peak,
# where the pool holds the ten 1 MiB segments it cached (free) and the eleven of 1.5 MiB in use,
# nothing left out; and that the page loads nothing.
# usage: cmake -DTOOL=... -DTRACE=... -DPAGE=... -P check_viz.cmake
execute_process(COMMAND ${TOOL} viz ${TRACE} -o ${PAGE} --config pool --config device RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpumem viz failed (${rc}): ${out}${err}")
endif()
if(NOT out MATCHES "^wrote [^\n]*: 42 records; pool: peak live 17301504 bytes, peak reserved 27787264 bytes; device: peak live 17301504 bytes, peak reserved 17301504 bytes\n$")
  message(FATAL_ERROR "it printed: ${out}")
endif()
file(READ ${PAGE} page)
foreach(want
    "<!DOCTYPE html>"
    "<tr><th>configuration</th><th class=\"config\">pool</th><th class=\"config\">device</th></tr>"
    "<tr><th>peak live</th><td title=\"17301504 bytes\">16.50 MiB</td><td title=\"17301504 bytes\">16.50 MiB</td></tr>"
    "<tr><th>peak reserved</th><td title=\"27787264 bytes\">26.50 MiB</td><td title=\"17301504 bytes\">16.50 MiB</td></tr>"
    "<tr><th>reserved / live</th><td>1.6061</td><td>1.0000</td></tr>"
    "<canvas id=\"timeline\""
    "<canvas id=\"segments\"")
  string(FIND "${page}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the page lacks: ${want}")
  endif()
endforeach()
if(NOT page MATCHES "<script type=\"application/json\" id=\"viz-data\">([^<]*)</script>")
  message(FATAL_ERROR "the page has no data")
endif()
set(data "${CMAKE_MATCH_1}")
function(expect want)
  string(JSON got GET "${data}" ${ARGN})
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "${ARGN}: ${got}, expected ${want}")
  endif()
endfunction()
expect(42 records)
expect("gpumem trace" format)
expect(21 bands allocations)
expect(21 bands drawn)
expect(0x100 streams 0)
expect(0x200 streams 1)
# The first allocation: record 0, freed at record 10, 1 MiB on the first stream, no call stack.
foreach(field_value "0;0" "2;10" "4;1048576" "5;0" "6;-1" "7;1")
  list(GET field_value 0 field)
  list(GET field_value 1 value)
  expect(${value} blocks 0 ${field})
endforeach()
expect(pool configs 0 name)
expect(17301504 configs 0 peak_live)
expect(30 configs 0 peak_live_record)
expect(27787264 configs 0 peak_reserved)
expect(30 configs 0 peak_reserved_record)
expect(21 configs 0 map segments)
expect(0 configs 0 map left_out segments)
expect(0 configs 0 map left_out bytes)
expect(device configs 1 name)
expect(17301504 configs 1 peak_reserved)
string(JSON map_type TYPE "${data}" configs 1 map)
if(NOT map_type STREQUAL "NULL")
  message(FATAL_ERROR "the device, no pool, has a segment map")
endif()
# The rows, the largest first; their blocks' states (0 free, 1 in use) and the bytes they hold.
string(JSON rows LENGTH "${data}" configs 0 map rows)
set(free 0)
set(used 0)
set(bytes 0)
set(previous 99999999999)
math(EXPR last "${rows} - 1")
foreach(r RANGE ${last})
  string(JSON mapped GET "${data}" configs 0 map rows ${r} mapped)
  if(mapped GREATER previous)
    message(FATAL_ERROR "row ${r} (${mapped} bytes) is larger than the one before it (${previous})")
  endif()
  set(previous ${mapped})
  math(EXPR bytes "${bytes} + ${mapped}")
  string(JSON state GET "${data}" configs 0 map rows ${r} blocks 0 2)
  if(state EQUAL 0)
    math(EXPR free "${free} + 1")
  elseif(state EQUAL 1)
    math(EXPR used "${used} + 1")
  endif()
endforeach()
if(NOT rows EQUAL 21 OR NOT free EQUAL 10 OR NOT used EQUAL 11 OR NOT bytes EQUAL 27787264)
  message(FATAL_ERROR "expected 21 segments of 27787264 bytes, 10 free and 11 in use; found ${rows} of ${bytes}, ${free} and ${used}")
endif()
if(page MATCHES "http[s]?://[^\"]*\\.(js|css)" OR page MATCHES "<script src" OR page MATCHES "<link " OR
   page MATCHES "fetch\\(" OR page MATCHES "XMLHttpRequest")
  message(FATAL_ERROR "the page loads something from the network")
endif()
message(STATUS "viz page structure: ok")
