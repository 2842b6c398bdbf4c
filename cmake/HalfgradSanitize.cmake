# ASan + UBSan for a target and everything that links it. gcc needs float-cast-overflow named
# explicitly (it is not part of -fsanitize=undefined there); any finding aborts the test.
function(halfgrad_sanitize target)
  set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND flags -fsanitize=float-cast-overflow)
  endif()
  target_compile_options(${target} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
  target_link_options(${target} PUBLIC ${flags})
endfunction()
