#include "runtime/model/host_memory.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace k3::model {
namespace {

std::string slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first decimal integer in s (leading blanks skipped); -1 if none.
std::int64_t leading_int(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  std::int64_t v = -1;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc{} ? v : -1;
}

// The value of the line "key N" (key followed by blanks) in a key/value text; -1 if absent.
std::int64_t keyed(std::string_view text, std::string_view key) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == '\t'))
      return leading_int(line.substr(key.size()));
    at = end + 1;
  }
  return -1;
}

} // namespace

namespace detail {

std::int64_t meminfo_available(std::string_view meminfo) {
  const std::int64_t kb = keyed(meminfo, "MemAvailable:");
  return kb < 0 ? -1 : kb * 1024;
}

std::int64_t cgroup_headroom(std::string_view limit, std::string_view usage, std::string_view stat) {
  const std::int64_t lim = leading_int(limit);
  if (lim < 0 || lim >= (std::int64_t{1} << 60)) return -1; // "max", unreadable, or v1's unlimited
  std::int64_t used = std::max<std::int64_t>(leading_int(usage), 0);
  std::int64_t file = keyed(stat, "file");
  if (file < 0) file = keyed(stat, "cache");
  if (file > 0) used = std::max<std::int64_t>(used - file, 0);
  return std::max<std::int64_t>(lim - used, 0);
}

} // namespace detail

std::int64_t host_memory_available() {
  std::int64_t avail = detail::meminfo_available(slurp("/proc/meminfo"));
  if (avail < 0) return -1;
  std::int64_t cg = detail::cgroup_headroom(slurp("/sys/fs/cgroup/memory.max"), slurp("/sys/fs/cgroup/memory.current"),
                                            slurp("/sys/fs/cgroup/memory.stat"));
  if (cg < 0)
    cg = detail::cgroup_headroom(slurp("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
                                 slurp("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
                                 slurp("/sys/fs/cgroup/memory/memory.stat"));
  return cg < 0 ? avail : std::min(avail, cg);
}

} // namespace k3::model
