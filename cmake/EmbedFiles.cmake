# Writes a C++ source holding the given data files as string literals, so `k3 sim` finds its
# hardware presets, plans and model configs without a source tree. Run in script mode:
#   cmake -DOUT=file.cpp -DROOT=<config dir> -DFILES="a|b" -P EmbedFiles.cmake
string(REPLACE "|" ";" FILES "${FILES}")
set(body "// Generated from config/ by cmake/EmbedFiles.cmake; do not edit.\n#include \"runtime/sim/builtin.hpp\"\n\nnamespace k3::sim {\nnamespace {\nconst builtin_file files[] = {\n")
foreach(f IN LISTS FILES)
  file(READ "${ROOT}/${f}" text)
  get_filename_component(dir "${f}" DIRECTORY)
  get_filename_component(name "${f}" NAME_WE)
  string(APPEND body "  {\"${dir}\", \"${name}\", R\"K3DATA(${text})K3DATA\"},\n")
endforeach()
string(APPEND body "};\n} // namespace\n\nstd::span<const builtin_file> builtin_files() { return files; }\n\n} // namespace k3::sim\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
