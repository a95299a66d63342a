# Warnings are errors in Kiln's own code; generated code and third-party headers are exempt.
add_library(kiln_build_flags INTERFACE)
target_compile_options(kiln_build_flags INTERFACE -Wall -Wextra -Werror -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(kiln_build_flags INTERFACE -Wthread-safety)
endif()

if(KILN_SANITIZE)
  add_compile_options(-fsanitize=${KILN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${KILN_SANITIZE})
endif()

# Kiln's own targets: warnings, C++20 and the source root on the include path.
function(kiln_target_defaults target)
  target_link_libraries(${target} PRIVATE kiln_build_flags)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()
