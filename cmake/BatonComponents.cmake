# A component is one concept folder (events, core/config, core/checkpoint, ...). Its sources build an OBJECT
# library; libbaton.so is the union of all components. Each component's *_test.cpp files, which live beside the
# code they test, build one test executable per component, run as one process (libtorch starts are costly).
#
#   baton_component(NAME <name> SOURCES <files> [DEPENDS <components>] [LIBS <link libraries>]
#                   [TESTS <test files>] [TEST_LIBS <extra libraries for the tests>] [TEST_SHARED])
# TEST_SHARED links the tests against libbaton.so instead of the components' objects: needed when the tests load
# plugins, which link libbaton.so themselves (two copies of the SDK's typeinfo would not compare equal).
set_property(GLOBAL PROPERTY BATON_COMPONENTS "")

# Test programs compile their own code at -O1 in optimized builds: it is glue around the library under test (linked
# as built, at the build type's level) and LibTorch's kernels, and -O3's code generation was a third of a test
# file's compile time (a plugin's test on the 2-core AMD EPYC, GCC 12: 22 s at -O3, 16 s at -O1, 13 s of it parsing
# LibTorch's headers), with about 45 test programs built on every platform CI checks.
function(baton_test_program target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O1>)
  endif()
endfunction()

function(baton_component)
  cmake_parse_arguments(C "TEST_SHARED" "NAME" "SOURCES;DEPENDS;LIBS;TESTS;TEST_LIBS" ${ARGN})
  set(target baton_${C_NAME})
  add_library(${target} OBJECT ${C_SOURCES})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/events/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/core/sdk/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/core/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/core>)
  target_compile_definitions(${target} PRIVATE BATON_BUILDING_LIBRARY)
  foreach(dep IN LISTS C_DEPENDS)
    target_link_libraries(${target} PUBLIC baton_${dep})
  endforeach()
  target_link_libraries(${target} PUBLIC ${C_LIBS})
  set_property(GLOBAL APPEND PROPERTY BATON_COMPONENTS ${C_NAME})
  set_property(TARGET ${target} PROPERTY BATON_DEPENDS ${C_DEPENDS})

  if(BATON_BUILD_TESTS AND C_TESTS AND C_TEST_SHARED)
    add_executable(${C_NAME}_tests ${C_TESTS} $<TARGET_OBJECTS:baton_test_main>)
    baton_test_program(${C_NAME}_tests)
    target_link_libraries(${C_NAME}_tests PRIVATE baton ${C_LIBS} doctest::doctest ${C_TEST_LIBS})
    target_include_directories(${C_NAME}_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/support ${PROJECT_SOURCE_DIR}/core)
    target_compile_definitions(${C_NAME}_tests PRIVATE
      BATON_SOURCE_DIR="${PROJECT_SOURCE_DIR}" BATON_BINARY_DIR="${CMAKE_BINARY_DIR}")
    add_test(NAME ${C_NAME} COMMAND ${C_NAME}_tests --no-intro=true)
  elseif(BATON_BUILD_TESTS AND C_TESTS)
    # The test links its own component and every component it depends on, transitively, as objects, so a
    # component's tests build and run while other components are still being written.
    set(objects "")
    set(pending ${C_NAME})
    set(seen "")
    while(pending)
      list(POP_FRONT pending current)
      if(current IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${current})
      if(NOT current STREQUAL C_NAME)  # the component itself comes in through target_link_libraries below
        list(APPEND objects $<TARGET_OBJECTS:baton_${current}>)
      endif()
      get_property(deps TARGET baton_${current} PROPERTY BATON_DEPENDS)
      list(APPEND pending ${deps})
    endwhile()
    add_executable(${C_NAME}_tests ${C_TESTS} ${objects} $<TARGET_OBJECTS:baton_test_main>)
    baton_test_program(${C_NAME}_tests)
    target_link_libraries(${C_NAME}_tests PRIVATE ${target} doctest::doctest ${C_TEST_LIBS})
    target_include_directories(${C_NAME}_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
    target_compile_definitions(${C_NAME}_tests PRIVATE
      BATON_SOURCE_DIR="${PROJECT_SOURCE_DIR}" BATON_BINARY_DIR="${CMAKE_BINARY_DIR}")
    add_test(NAME ${C_NAME} COMMAND ${C_NAME}_tests --no-intro=true)
  endif()
endfunction()

# baton_cuda_compile_check(<name> SOURCES <files> [INCLUDES <folders>] [DEFINITIONS <definitions>])
# Where baton's LibTorch has no CUDA (Debian's), the sources that a CUDA LibTorch compiles in still compile here, as
# an object library linked into nothing, against the CUDA toolkit's headers when this machine has them, so that a
# change that breaks the CUDA build shows on every platform. Debian's LibTorch headers lack the one file its CUDA
# build generates (c10/cuda/impl/cuda_cmake_macros.h); a stand-in supplies it for these checks only. Sets
# <name>_CHECKED in the caller's scope (whether the check was added).
function(baton_cuda_compile_check name)
  cmake_parse_arguments(C "" "" "SOURCES;INCLUDES;DEFINITIONS" ${ARGN})
  find_package(CUDAToolkit QUIET)
  set(${name}_CHECKED OFF PARENT_SCOPE)
  if(NOT CUDAToolkit_FOUND)
    return()
  endif()
  set(stand_in ${CMAKE_BINARY_DIR}/cuda-header-stand-in)
  if(NOT EXISTS ${stand_in}/c10/cuda/impl/cuda_cmake_macros.h)
    file(WRITE ${stand_in}/c10/cuda/impl/cuda_cmake_macros.h
      "#pragma once\n// Stand-in for the header a CUDA build of LibTorch generates; compile check only.\n"
      "#define C10_CUDA_BUILD_SHARED_LIBS\n")
  endif()
  add_library(${name} OBJECT ${C_SOURCES})
  target_include_directories(${name} PRIVATE
    ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/core/sdk/include ${PROJECT_SOURCE_DIR}/core/include
    ${PROJECT_SOURCE_DIR}/events/include ${stand_in} ${CUDAToolkit_INCLUDE_DIRS} ${C_INCLUDES})
  target_include_directories(${name} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
  target_compile_definitions(${name} PRIVATE USE_CUDA ${C_DEFINITIONS})
  set(${name}_CHECKED ON PARENT_SCOPE)
endfunction()
