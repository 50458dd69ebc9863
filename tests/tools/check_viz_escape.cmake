# `gpumem viz` on a trace whose file name holds HTML (<script>, quotes, an ampersand): the page must
# show the name as text, escaped, wherever it shows it, and hold no markup from it.
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
foreach(want "<title>gpumem: ${DIR}/${escaped}</title>" "<h1>gpumem: ${DIR}/${escaped}, replayed through pool</h1>")
  string(FIND "${page}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the page lacks: ${want}")
  endif()
endforeach()
string(FIND "${page}" "<script" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "the page holds a <script> element from the file's name")
endif()
message(STATUS "viz page escapes the file name: ok")
