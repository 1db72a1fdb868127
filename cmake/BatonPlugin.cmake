# baton_add_plugin(<name> <sources...>)
# Builds a plugin the way the loader expects it: a MODULE library named <name>.so, compiled with LibTorch's flags
# (the _GLIBCXX_USE_CXX11_ABI value must match libbaton's), hidden visibility (only baton_plugin_entry is exported)
# and PIC, linked against libbaton. In this tree the output goes to the built-in plugin folder.
function(baton_add_plugin name)
  add_library(${name} MODULE ${ARGN})
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    OUTPUT_NAME ${name}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(${name} PRIVATE baton::baton)
  if(BATON_SOURCE_TREE)
    set_target_properties(${name} PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${BATON_PLUGIN_OUTPUT_DIRECTORY}
      BUILD_RPATH "$ORIGIN/../.."
      INSTALL_RPATH "$ORIGIN/../..")
  endif()
endfunction()
