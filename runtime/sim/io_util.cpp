#include "runtime/sim/io_util.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/sim/builtin.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw sim_error(std::string(what) + " " + path + ": cannot read (no such file, or not a preset name)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_file(const std::string& s) {
  std::error_code ec;
  return std::filesystem::is_regular_file(s, ec);
}

json::value parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw sim_error(source + ": not valid JSON: " + e.what());
  }
}

std::string builtin_list(std::string_view kind) {
  std::string out;
  for (const auto& n : builtin_names(kind)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

double json_number(const json::value& v, const std::string& where) {
  if (v.k != json::value::kind::integer && v.k != json::value::kind::real)
    throw sim_error(where + ": expected a number");
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.s.c_str(), &end);
  if (end == v.s.c_str() || errno == ERANGE) throw sim_error(where + ": number out of range: " + v.s);
  return d;
}

const json::value& json_member(const json::value& obj, std::string_view key, const std::string& where) {
  const json::value* m = obj.find(key);
  if (!m) throw sim_error(where + ": missing key '" + std::string(key) + "'");
  return *m;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return o;
}

} // namespace k3::sim
