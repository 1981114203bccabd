# Shared builds of the two public libraries, from the same objects as the static ones.
#
#   libcanzona.so       the planner (canzona.h): plan files, cost model, DP/TP algorithms; GLPK
#   libcanzona-exec.so  the executor (canzona_exec.h) and the plan-format part of canzona.h
#                       (errors, names, reading and writing model/cluster/plan files); no GLPK
#
# Every object is compiled with hidden visibility; the public headers switch default visibility
# on for their declarations, so each library exports exactly the functions its headers declare
# (tests/package/check_exports.sh checks it). Both carry their own copy of the plan-format code
# and export its public functions; a program that loads both gets one copy of each function,
# which is fine as long as both come from the same build.
if(NOT CZ_SHARED OR CZ_SANITIZE OR CZ_FUZZ)
  # Sanitizer and fuzzing builds test the code, not the packaging.
  return()
endif()

add_library(canzona_shared SHARED $<TARGET_OBJECTS:canzona> $<TARGET_OBJECTS:canzona_format>)
target_include_directories(canzona_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/planner/include>
  $<BUILD_INTERFACE:${CZ_GENERATED_INCLUDE_DIR}>)
target_link_libraries(canzona_shared PRIVATE PkgConfig::JANSSON ${GLPK_LIBRARY} ${MATH_LIBRARY})
set_target_properties(canzona_shared PROPERTIES OUTPUT_NAME canzona VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR}
                      LINK_OPTIONS "LINKER:--no-undefined")
add_library(canzona::canzona ALIAS canzona_shared)

