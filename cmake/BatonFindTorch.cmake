# Finds LibTorch the same way for baton's own build and for the installed batonConfig.cmake:
#
#   baton_find_torch(<find_package|find_dependency>)
#
# LibTorch's TorchConfig.cmake finds its Caffe2 configuration and its libraries (libtorch, libc10, libc10_cuda)
# with PATHS hints, which CMake searches only after the system's own folders. On a machine that also has Debian's
# libtorch-dev, `-DTorch_DIR=<PyTorch's share/cmake/Torch>` would then take PyTorch's headers but Debian's
# Caffe2Config.cmake and libraries: a build that mixes two LibTorch versions and fails only at run time. Putting
# Torch_DIR's prefix first on CMAKE_PREFIX_PATH while it runs makes every one of those searches find the LibTorch
# that Torch_DIR names.
# The link option that makes libstdc++'s shared library the first needed library: its path as the compiler finds
# it (-print-file-name), or -lstdc++ where the compiler names no such file.
function(baton_libstdcxx_first out)
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so.6
                  OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _status)
  if(_status EQUAL 0 AND IS_ABSOLUTE "${_path}" AND EXISTS "${_path}")
    set(${out} "LINKER:--push-state,--no-as-needed,${_path},--pop-state" PARENT_SCOPE)
  else()
    set(${out} "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state" PARENT_SCOPE)
  endif()
endfunction()

macro(baton_find_torch how)
  set(_baton_saved_prefix_path "${CMAKE_PREFIX_PATH}")
  if(Torch_DIR)
    # <prefix>/share/cmake/Torch
    get_filename_component(_baton_torch_prefix "${Torch_DIR}/../../.." ABSOLUTE)
    list(PREPEND CMAKE_PREFIX_PATH "${_baton_torch_prefix}")
  endif()
  if("${how}" STREQUAL "find_dependency")
    find_dependency(Torch)
  else()
    find_package(Torch REQUIRED)
  endif()
  set(CMAKE_PREFIX_PATH "${_baton_saved_prefix_path}")
  unset(_baton_saved_prefix_path)
  unset(_baton_torch_prefix)

  # PyTorch 2.11's libtorch.so (the wheel's) exports its own copies of std::filesystem's functions, compiled with
  # weak references that stay unresolved: a program whose libtorch.so comes before libstdc++.so in its list of
  # needed libraries gets std::filesystem::remove_all from libtorch and crashes on it (a jump to address 0; seen on
  # a GPU machine and here). libstdc++ named first, before any object file, makes the loader find the real ones.
  # On `torch` itself, so every target that links LibTorch gets it, users' programs through batonConfig.cmake too.
  # Named by the shared library's own path: a compiler installed without the libstdc++.so link (only
  # libstdc++.a beside it, as on a GPU machine's /opt/gcc) resolves -lstdc++ to the archive, which adds no needed
  # library, and the program then took remove_all from libtorch.so again.
  if(TARGET torch AND CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    baton_libstdcxx_first(_baton_libstdcxx_option)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "${_baton_libstdcxx_option}")
    unset(_baton_libstdcxx_option)
  endif()

  # PyTorch's wheel keeps the CUDA libraries its LibTorch was built with (cuDNN, NCCL, the CUDA runtime) in the
  # nvidia-* packages beside torch/ (site-packages/nvidia/*/lib). LibTorch's CMake configuration links the CUDA
  # toolkit's copies instead, so the folders of the toolkit (which may hold an older libnccl.so.2, without the
  # symbols libtorch_cuda needs) come first in the linker's and the loader's search path unless these go before
  # them: BATON_TORCH_RUNTIME_DIRS, for the build's and the install's RPATH. Empty for other LibTorch builds.
  set(BATON_TORCH_RUNTIME_DIRS "")
  if(TORCH_INSTALL_PREFIX AND IS_DIRECTORY "${TORCH_INSTALL_PREFIX}/../nvidia")
    get_filename_component(_baton_nvidia "${TORCH_INSTALL_PREFIX}/../nvidia" ABSOLUTE)
    file(GLOB _baton_nvidia_libs LIST_DIRECTORIES true "${_baton_nvidia}/*/lib")
    list(SORT _baton_nvidia_libs)
    set(BATON_TORCH_RUNTIME_DIRS "${TORCH_INSTALL_PREFIX}/lib" ${_baton_nvidia_libs})
    unset(_baton_nvidia)
    unset(_baton_nvidia_libs)
  endif()
endmacro()
