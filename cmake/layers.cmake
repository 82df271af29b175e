# layers.cmake: each layer of the library is its own object library, whose
# include path holds only itself and the layers below it (docs/api.md, Layout:
# bench, cli -> llm -> graph -> kernels -> arena -> runtime; text/ beside llm/
# on runtime alone). A layer's files name another layer's headers by folder
# ("runtime/internal.h", "kernels/opset.h"), found through a directory of
# links made here, build/layers/<layer>/, holding a link to each folder the
# layer may see and no other: an upward include does not compile. Relative
# includes that leave a folder ("../") are refused by the layering test, so
# nothing gets around it.

# Settings every layer shares (ortep_layer_settings) and the list of layers,
# in order (the global property ORTEP_LAYERS), for the libraries to gather.
add_library(ortep_layer_settings INTERFACE)
target_include_directories(ortep_layer_settings INTERFACE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include ${PROJECT_BINARY_DIR})
target_link_libraries(ortep_layer_settings INTERFACE ortep_flags Threads::Threads m ${CMAKE_DL_LIBS})
if(NOT ORTEP_SYSTEM_ALLOCATOR)
  target_link_libraries(ortep_layer_settings INTERFACE mimalloc)
endif()
target_compile_options(ortep_layer_settings INTERFACE $<$<COMPILE_LANGUAGE:C>:-Wconversion -fvisibility=hidden>
                                                      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility=hidden>)
target_compile_definitions(ortep_layer_settings INTERFACE ORTEP_BUILDING=1)

# ortep_layer_view(NAME SEES folder...): build/layers/NAME/ with a link to
# each folder; returns its path in ORTEP_LAYER_VIEW.
function(ortep_layer_view name)
  set(dir ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  foreach(folder ${ARGN})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${dir}/${folder} SYMBOLIC)
  endforeach()
  set(ORTEP_LAYER_VIEW ${dir} PARENT_SCOPE)
endfunction()

# ortep_layer(NAME [BELOW layer...] SOURCES file... [LIBS target...]): the
# object library ortep_NAME over NAME/'s sources, seeing NAME and BELOW.
function(ortep_layer name)
  cmake_parse_arguments(L "" "" "BELOW;SOURCES;LIBS" ${ARGN})
  ortep_layer_view(${name} ${name} ${L_BELOW})
  add_library(ortep_${name} OBJECT ${L_SOURCES})
  target_include_directories(ortep_${name} PRIVATE ${ORTEP_LAYER_VIEW})
  target_link_libraries(ortep_${name} PRIVATE ortep_layer_settings ${L_LIBS})
  set_property(GLOBAL APPEND PROPERTY ORTEP_LAYERS ortep_${name})
endfunction()
