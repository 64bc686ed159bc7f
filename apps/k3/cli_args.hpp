#pragma once
// Minimal flag reader shared by the k3 subcommands: `--flag value` pairs and boolean switches,
// with errors that name the flag. Throws std::invalid_argument.

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3::app {

class cli_args {
public:
  explicit cli_args(const std::vector<std::string_view>& args) : a_(args) {}
  [[nodiscard]] bool done() const noexcept { return i_ >= a_.size(); }
  [[nodiscard]] std::string_view next() { return a_[i_++]; }
  [[nodiscard]] std::string value(std::string_view flag) {
    if (i_ >= a_.size()) throw std::invalid_argument(std::string(flag) + " needs a value");
    return std::string(a_[i_++]);
  }
  [[nodiscard]] long long integer(std::string_view flag, long long lo, long long hi) {
    const auto s = value(flag);
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < lo || v > hi)
      throw std::invalid_argument(std::string(flag) + " expects an integer in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got '" + s + "'");
    return v;
  }
  [[nodiscard]] double number(std::string_view flag) {
    const auto s = value(flag);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') throw std::invalid_argument(std::string(flag) + " expects a number, got '" + s + "'");
    return v;
  }

private:
  const std::vector<std::string_view>& a_;
  std::size_t i_ = 0;
};

} // namespace k3::app
