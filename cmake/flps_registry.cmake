# A registry's list, generated from what the build compiles (the compute
# backends of worker/, the transports of transports/): for each NAME,
# X(NAME) in a header the registry includes, and PREFIXNAME.c to compile.
#   flps_registry(TEMPLATE OUTPUT PREFIX NAMES...) configures TEMPLATE into
#   OUTPUT with @FLPS_REGISTRY_X@ replaced by "X(a) X(b) ..." and sets
#   FLPS_REGISTRY_SOURCES in the caller to the sources to compile.
function(flps_registry template output prefix)
  set(FLPS_REGISTRY_X "")
  set(sources)
  foreach(name IN LISTS ARGN)
    string(APPEND FLPS_REGISTRY_X " X(${name})")
    list(APPEND sources ${prefix}${name}.c)
  endforeach()
  string(STRIP "${FLPS_REGISTRY_X}" FLPS_REGISTRY_X)
  configure_file(${template} ${output} @ONLY)
  set(FLPS_REGISTRY_SOURCES ${sources} PARENT_SCOPE)
endfunction()
