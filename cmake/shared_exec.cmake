# The shared executor library libcanzona-exec.so (see shared_libs.cmake). Included from
# executor/CMakeLists.txt, where the executor's imported dependencies (OpenBLAS, MPI) are visible.
if(NOT CZ_SHARED OR CZ_SANITIZE OR CZ_FUZZ)
  return()
endif()
# The executor's own link dependencies (OpenBLAS, MPI, and whatever a backend adds) follow
# from the static target, so a backend added there needs nothing here.
add_library(canzona_exec_shared SHARED $<TARGET_OBJECTS:canzona_exec>
                                       $<TARGET_OBJECTS:canzona_format>)
target_include_directories(canzona_exec_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/planner/include>
  $<BUILD_INTERFACE:${CZ_GENERATED_INCLUDE_DIR}>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/executor/include>)
target_link_libraries(canzona_exec_shared PRIVATE
  $<TARGET_PROPERTY:canzona_exec,LINK_LIBRARIES>)
set_target_properties(canzona_exec_shared PROPERTIES OUTPUT_NAME canzona-exec
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                      LINK_OPTIONS "LINKER:--no-undefined")
add_library(canzona::exec ALIAS canzona_exec_shared)
