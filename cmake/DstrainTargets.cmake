# Helpers that give every dstrain library the same shape:
#   <folder>/include/dstrain/<folder>/*.hpp  public headers
#   <folder>/src/*.cpp                        sources
include(CMakePackageConfigHelpers)

set(DSTRAIN_WARNINGS -Wall -Wextra -Wno-unused-parameter)

# ds_add_library(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [TORCH])
# Creates dstrain_<name> (alias dstrain::<name>). TORCH links LibTorch and reuses the shared
# precompiled header so that torch's headers are parsed once per build, not once per file.
function(ds_add_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target dstrain_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(dstrain::${name} ALIAS ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${target} PRIVATE ${DSTRAIN_WARNINGS})
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(ARG_TORCH)
    target_link_libraries(${target} PUBLIC torch)
    ds_use_torch_pch(${target})
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  ds_install_targets(${target})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
    install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  endif()
endfunction()

function(ds_install_targets)
  install(TARGETS ${ARGN} EXPORT dstrainTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()

# One precompiled LibTorch header, built once and reused by every torch-using target.
add_library(dstrain_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
target_link_libraries(dstrain_torch_pch PRIVATE torch)
target_precompile_headers(dstrain_torch_pch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/torch_pch.hpp)

function(ds_use_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM dstrain_torch_pch)
endfunction()
