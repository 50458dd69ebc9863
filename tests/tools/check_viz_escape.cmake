# `gpumem viz` on a trace whose file name holds HTML (<script>, quotes, an ampersand): the page must
# show the name as text, escaped, wherever it shows it, and hold no markup from it: in its HTML
# escaped as HTML, and in its data as a JSON string with no "<" or "&" that could end the element.
# usage: cmake -DTOOL=... -DTRACE=... -DDIR=... -P check_viz_escape.cmake
set(name "x<script>alert(1)</script>\"&'.trace")
set(escaped "x&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;&#39;.trace")
file(MAKE_DIRECTORY ${DIR})
configure_file(${TRACE} "${DIR}/${name}" COPYONLY)
execute_process(COMMAND ${TOOL} viz "${DIR}/${name}" -o ${DIR}/page.html RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpumem viz failed (${rc}): ${out}${err}")
endif()
file(READ ${DIR}/page.html page)
foreach(want "<title>gpumem: ${DIR}/${escaped}</title>" "<h1>gpumem: ${DIR}/${escaped}, replayed through pool</h1>"
        "\"trace\":\"${DIR}/x\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\\\"\\u0026'.trace\"")
  string(FIND "${page}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the page lacks: ${want}")
  endif()
endforeach()
# The page's own two script elements (its data, its code), and none from the name.
string(REGEX MATCHALL "<script" scripts "${page}")
list(LENGTH scripts nscripts)
string(FIND "${page}" "alert(1)</script>" raw)
if(NOT nscripts EQUAL 2 OR NOT raw EQUAL -1)
  message(FATAL_ERROR "the page holds a <script> element from the file's name (${nscripts} script elements)")
endif()
message(STATUS "viz page escapes the file name: ok")
