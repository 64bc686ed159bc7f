#pragma once
// The simulator's built-in data: every file of config/hardware, config/plans and config/models
// compiled into the binary (cmake/EmbedFiles.cmake), so presets resolve by name anywhere. Users
// add their own by passing a file path wherever a preset name is accepted.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::sim {

struct builtin_file {
  std::string_view kind; ///< "hardware", "plans" or "models"
  std::string_view name; ///< file name without extension ("b300", "A", "kimi-k3")
  std::string_view text;
};

[[nodiscard]] std::span<const builtin_file> builtin_files();

/// The built-in file `name` (case-insensitive, '-' and '_' equal) of `kind`, if any.
[[nodiscard]] inline std::optional<std::string_view> builtin(std::string_view kind, std::string_view name) {
  auto norm = [](std::string_view s) {
    std::string o;
    for (char c : s) o += c == '-' ? '_' : static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return o;
  };
  const std::string want = norm(name);
  for (const auto& f : builtin_files())
    if (f.kind == kind && norm(f.name) == want) return f.text;
  return std::nullopt;
}

[[nodiscard]] inline std::vector<std::string> builtin_names(std::string_view kind) {
  std::vector<std::string> out;
  for (const auto& f : builtin_files())
    if (f.kind == kind) out.emplace_back(f.name);
  return out;
}

} // namespace k3::sim
