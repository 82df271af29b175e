# layering.cmake: the ctest that proves the layers are enforced by the build
# (cmake/layers.cmake). Run as cmake -DSRC=... -DBIN=... -DCC=... -P.
#  1. No library file includes with "../": a relative path would get around
#     the include paths, so every cross-folder include names its layer.
#  2. Each layer's include path admits the layers below it and refuses the
#     ones above: a downward include compiles, an upward one fails with
#     "No such file" (so it failed for that reason and no other).
foreach(folder runtime arena kernels graph llm text tools bench cli)
  file(GLOB_RECURSE files ${SRC}/${folder}/*.c ${SRC}/${folder}/*.h ${SRC}/${folder}/*.cu)
  foreach(f ${files})
    file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
    if(hits)
      message(FATAL_ERROR "${f}: ${hits}: name the layer instead (\"runtime/internal.h\"), so the build checks it")
    endif()
  endforeach()
endforeach()

# layer, header, whether it may include it
set(cases
  graph:runtime/internal.h:yes  graph:kernels/opset.h:yes  llm:graph/internal.h:yes
  kernels:arena/internal.h:yes  text:runtime/internal.h:yes
  graph:llm/llama.h:no          kernels:graph/internal.h:no arena:kernels/opset.h:no
  runtime:arena/internal.h:no   text:llm/internal.h:no      text:graph/internal.h:no
  llm:text/tokenizer.c:no)
set(probe ${BIN}/layering-probe.c)
foreach(c ${cases})
  string(REPLACE ":" ";" fields "${c}")
  list(GET fields 0 layer)
  list(GET fields 1 header)
  list(GET fields 2 allowed)
  file(WRITE ${probe} "#include \"${header}\"\nint ortep_layering_probe;\n")
  execute_process(COMMAND ${CC} -std=c17 -D_GNU_SOURCE -fsyntax-only -I${BIN}/layers/${layer} -I${SRC}/include
                          -I${BIN}/include -I${BIN} ${probe}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(allowed STREQUAL "yes" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${layer}/ should see ${header}, but it does not compile:\n${err}")
  elseif(allowed STREQUAL "no" AND rc EQUAL 0)
    message(FATAL_ERROR "${layer}/ includes ${header}, a layer above it, and that compiled: the layering is not enforced")
  elseif(allowed STREQUAL "no" AND NOT err MATCHES "No such file")
    message(FATAL_ERROR "${layer}/ including ${header} failed, but not for want of the file:\n${err}")
  endif()
  message(STATUS "${layer}/ -> ${header}: ${allowed}, as it should")
endforeach()
file(REMOVE ${probe})
