#pragma once
// Shared CLI11 conventions for every `k3` command and for the launch-line parser of the
// simulator, so all of them behave alike:
//   - a later flag overrides an earlier one (TakeLast), lists accumulate where declared;
//   - boolean options take an optional value (`--x`, `--x true`, `--x=false`, yes/no, 1/0),
//     the spellings vLLM/SGLang launch lines use;
//   - parse errors become std::invalid_argument naming the flag; an unknown flag reads
//     "unknown option '--x' (see `k3 CMD --help`)".
// `key: value` files (the `--config FILE` form) are read by read_key_value_file.

#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace k3::conf {

/// TakeLast for repeated options; no extras; help formatting shared by all commands.
void prepare_app(CLI::App& app);

/// A boolean option with an optional value (absent value = true).
CLI::Option* add_bool(CLI::App& app, const std::string& names, bool& target, const std::string& help);

/// Parses `args` (in order, without program or subcommand names). Throws std::invalid_argument
/// with CLI11's message (prefixed by `who`); `--help` is not special here (the caller's root
/// app handles it).
void parse_or_throw(CLI::App& app, const std::vector<std::string>& args, const std::string& who);

/// The message for a CLI11 parse error: unknown options named one by one.
[[nodiscard]] std::string describe_parse_error(const std::exception& e, const std::string& who);

struct key_value {
  std::string key, value;
  int line = 0;
};
/// `key: value` lines (`#` comments, blank lines, optional quotes around values). Throws
/// std::invalid_argument naming FILE:LINE for a line without `:` and when FILE cannot be read.
[[nodiscard]] std::vector<key_value> read_key_value_file(const std::string& path);

} // namespace k3::conf
