# muster_library(NAME SRCS ... DEPS ...): a static library of our own code, public headers in include/.
function(muster_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${MUSTER_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# muster_test(NAME SRCS ... DEPS ... [TIMEOUT s] [LABELS ...]): one gtest binary, one ctest entry.
# A whole binary is one ctest test so that each has a TIMEOUT and failures stay readable.
function(muster_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${MUSTER_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "MUSTER_BIN_DIR=${CMAKE_BINARY_DIR}/bin;PYTHON_EXEC=/usr/bin/python3;MUSTER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

# Unit tests that share their libraries and timeout, each NAME built from NAME.cc as muster_test
# builds it: muster_tests(DEPS libs... TIMEOUT seconds TESTS name...).
function(muster_tests)
  cmake_parse_arguments(ARG "" "TIMEOUT" "DEPS;TESTS" ${ARGN})
  foreach(t ${ARG_TESTS})
    muster_test(${t} SRCS ${t}.cc DEPS ${ARG_DEPS} TIMEOUT ${ARG_TIMEOUT})
  endforeach()
endfunction()
