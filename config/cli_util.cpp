#include "config/cli_util.hpp"

#include <fstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

namespace k3::conf {

void prepare_app(CLI::App& app) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras(false);
  app.get_formatter()->column_width(34);
}

CLI::Option* add_bool(CLI::App& app, const std::string& names, bool& target, const std::string& help) {
  return app.add_option(names, target, help)->expected(0, 1)->default_str("true")->type_name("[BOOL]");
}

std::string describe_parse_error(const std::exception& e, const std::string& who) {
  if (const auto* x = dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // CLI11 lists every unexpected token; name the first unknown flag the way users expect.
    const std::string what = x->what();
    const auto colon = what.find(": ");
    std::string rest = colon == std::string::npos ? what : what.substr(colon + 2);
    std::string first_flag, token;
    for (std::size_t i = 0; i <= rest.size(); ++i) {
      if (i == rest.size() || rest[i] == ' ') {
        if (!token.empty() && token[0] == '-' && first_flag.empty()) first_flag = token.substr(0, token.find('='));
        token.clear();
      } else {
        token += rest[i];
      }
    }
    if (!first_flag.empty()) return "unknown option '" + first_flag + "' (see `" + who + " --help`)";
    return "unexpected argument(s): " + rest + " (see `" + who + " --help`)";
  }
  return e.what();
}

void parse_or_throw(CLI::App& app, const std::vector<std::string>& args, const std::string& who) {
  std::vector<std::string> reversed(args.rbegin(), args.rend()); // CLI11's vector form is reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(describe_parse_error(e, who));
  }
}

std::vector<key_value> read_key_value_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--config: cannot open " + path);
  std::vector<key_value> out;
  std::string line;
  int n = 0;
  auto trim = [](const std::string& s) {
    const auto a = s.find_first_not_of(" \t\r");
    const auto b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
  };
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    line = trim(line);
    if (line.empty()) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) throw std::invalid_argument(path + ":" + std::to_string(n) + ": expected `key: value`");
    key_value kv;
    kv.key = trim(line.substr(0, colon));
    kv.value = trim(line.substr(colon + 1));
    if (kv.value.size() >= 2 && (kv.value.front() == '"' || kv.value.front() == '\'') && kv.value.back() == kv.value.front())
      kv.value = kv.value.substr(1, kv.value.size() - 2);
    kv.line = n;
    out.push_back(std::move(kv));
  }
  return out;
}

} // namespace k3::conf
