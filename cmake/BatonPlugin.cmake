# baton_add_plugin(<name> <sources...>)
# Builds a plugin the way the loader expects it: a MODULE library named <name>.so (no "lib" prefix: the loader
# resolves `name = "<name>"` to <name>.so), compiled with LibTorch's flags (the _GLIBCXX_USE_CXX11_ABI value must
# match libbaton's; they come from torch's INTERFACE_COMPILE_OPTIONS through baton::baton), C++17 or later, hidden
# visibility (only baton_plugin_entry is exported) and PIC, linked against libbaton.
#
# This file is used in two places: in baton's own tree (BATON_SOURCE_TREE is ON), where the output goes to the
# built-in plugin folder, and installed beside batonConfig.cmake, where a user's find_package(baton) includes it
# and the output goes where the user's project puts its libraries.
function(baton_add_plugin name)
  if(NOT ARGN)
    message(FATAL_ERROR "baton_add_plugin(${name}): no source files given")
  endif()
  if(NOT TARGET baton::baton)
    message(FATAL_ERROR "baton_add_plugin(${name}): the target baton::baton does not exist; "
                        "call find_package(baton REQUIRED) first")
  endif()
  add_library(${name} MODULE ${ARGN})
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    SUFFIX ".so"
    OUTPUT_NAME ${name}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    CXX_EXTENSIONS OFF)
  # C++17 unless the project asks for a later standard.
  get_target_property(standard ${name} CXX_STANDARD)
  if(NOT standard OR standard LESS 17 OR standard EQUAL 98)
    set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  endif()
  target_link_libraries(${name} PRIVATE baton::baton)
  # A symbol the plugin uses but nothing defines (a class missing BATON_API in the SDK, a forgotten source
  # file) is then a link error naming it, instead of "undefined symbol" when a run loads the plugin.
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  endif()
  # baton's install rules install the plugins that build into the built-in folder (see the top-level file).
  set_property(GLOBAL APPEND PROPERTY BATON_PLUGINS ${name})
  if(BATON_SOURCE_TREE)
    set_target_properties(${name} PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${BATON_PLUGIN_OUTPUT_DIRECTORY}
      BUILD_RPATH "$ORIGIN/../.."
      INSTALL_RPATH "$ORIGIN/../..")
  endif()
endfunction()
