# Writes OUTPUT, a C file that defines viz_page_html (the bytes of HTML) and viz_page_js (the bytes
# of the files in JS, "|"-separated, one after another), each ending with a NUL: the page of
# gpumem viz, built into the tool so that it needs no file beside it. The arrays are of unsigned
# char, which holds UTF-8's bytes past 0x7f without a conversion a compiler would warn of, and are
# written 24 bytes a line.
# usage: cmake -DOUTPUT=viz_assets.c -DHTML=viz_page.html "-DJS=a.js|b.js" -P viz_embed.cmake
function(bytes_of var)
  set(hex "")
  foreach(file ${ARGN})
    file(READ ${file} part HEX)
    string(APPEND hex "${part}")
  endforeach()
  # CMake's regular expressions have no {n}: a line's 24 bytes are spelled out.
  string(REPEAT "[0-9a-f][0-9a-f]" 24 line)
  string(REGEX REPLACE "(${line})" "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  set(${var} "${hex}" PARENT_SCOPE)
endfunction()
string(REPLACE "|" ";" js "${JS}")
bytes_of(html ${HTML})
bytes_of(script ${js})
file(WRITE ${OUTPUT}.tmp "/* Generated from tools/viz_page.html and tools/viz_*.js by tools/viz_embed.cmake. */\n"
                         "const unsigned char viz_page_html[] = {\n${html}0};\n"
                         "const unsigned char viz_page_js[] = {\n${script}0};\n")
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
