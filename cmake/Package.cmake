# Installs the CMake package that lets an outside project `find_package(dstrain)`.
set(DSTRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dstrain)
install(EXPORT dstrainTargets NAMESPACE dstrain:: DESTINATION ${DSTRAIN_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dstrainConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/dstrainConfig.cmake INSTALL_DESTINATION ${DSTRAIN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/dstrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/dstrainConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/dstrainConfigVersion.cmake DESTINATION ${DSTRAIN_CMAKE_DIR})
