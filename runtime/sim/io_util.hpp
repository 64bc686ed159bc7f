#pragma once
// Small helpers shared by the simulator's readers: whole-file reads and JSON number access with
// messages that name the file and the key.

#include <string>
#include <string_view>

#include "runtime/chat/json.hpp"

namespace k3::sim {

/// Reads a file; throws sim_error("<what> <path>: cannot read") if it cannot.
[[nodiscard]] std::string read_text_file(const std::string& path, std::string_view what);
/// True if `s` names an existing regular file.
[[nodiscard]] bool is_file(const std::string& s);

/// Parses JSON text; throws sim_error("<source>: not valid JSON: …").
[[nodiscard]] json::value parse_json(std::string_view text, const std::string& source);
/// "a, b, c": the built-in names of `kind`, for "not a preset" messages.
[[nodiscard]] std::string builtin_list(std::string_view kind);

[[nodiscard]] double json_number(const json::value& v, const std::string& where);
[[nodiscard]] const json::value& json_member(const json::value& obj, std::string_view key, const std::string& where);
[[nodiscard]] std::string lower(std::string_view s);

} // namespace k3::sim
