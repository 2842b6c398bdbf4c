# Warnings for halfgrad's own code, carried by an INTERFACE target so that consumers of the
# installed library never inherit them.
add_library(halfgrad_warnings INTERFACE)
target_compile_options(halfgrad_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unknown-pragmas>)
