# cmake --install: the shared libraries, their headers, the two programs, canzona's manual page
# and bash completion, a pkg-config file per library and a CMake package (find_package(canzona) with imported targets canzona::canzona and
# canzona::exec). The static libraries stay in the build tree: they carry internal symbols the
# tests use and would need every dependency's static form.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CZ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/canzona)
install(FILES ${PROJECT_SOURCE_DIR}/planner/include/canzona.h
              ${PROJECT_SOURCE_DIR}/planner/include/canzona_format.h
              ${CZ_GENERATED_INCLUDE_DIR}/canzona_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(tgt canzona_cli canzona_bench)
  if(TARGET ${tgt})
    install(TARGETS ${tgt} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
# The CLI's manual page and bash completion (bash-completion loads completions/<command>).
if(TARGET canzona_cli)
  install(FILES ${PROJECT_SOURCE_DIR}/docs/canzona.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  install(FILES ${PROJECT_SOURCE_DIR}/planner/cli/canzona.bash
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME canzona)
endif()
if(NOT TARGET canzona_shared)
  return() # CZ_SHARED=OFF (or a sanitizer build): headers, programs and their docs only
endif()

set(CZ_EXPORTED canzona_shared)
set_target_properties(canzona_shared PROPERTIES EXPORT_NAME canzona)
target_include_directories(canzona_shared PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
if(TARGET canzona_exec_shared)
  list(APPEND CZ_EXPORTED canzona_exec_shared)
  set_target_properties(canzona_exec_shared PROPERTIES EXPORT_NAME exec)
  target_include_directories(canzona_exec_shared PUBLIC
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  install(FILES ${PROJECT_SOURCE_DIR}/executor/include/canzona_exec.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
install(TARGETS ${CZ_EXPORTED} EXPORT canzonaTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT canzonaTargets NAMESPACE canzona:: DESTINATION ${CZ_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/canzonaConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/canzonaConfig.cmake
                              INSTALL_DESTINATION ${CZ_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/canzonaConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/canzonaConfig.cmake
              ${PROJECT_BINARY_DIR}/canzonaConfigVersion.cmake
        DESTINATION ${CZ_CMAKE_DIR})

# pkg-config: the shared libraries link their dependencies themselves, so a consumer needs
# only -lcanzona or -lcanzona-exec.
# Relocatable: the prefix is found from the .pc file's own folder (pkg-config's pcfiledir).
file(RELATIVE_PATH CZ_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
foreach(pc canzona canzona-exec)
  if(pc STREQUAL "canzona-exec" AND NOT TARGET canzona_exec_shared)
    continue()
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
