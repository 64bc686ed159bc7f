#pragma once
// How much memory this process can still take, for sizing decisions at start-up (copying the
// weights into memory, the CPU KV pools).
//
// MemAvailable (/proc/meminfo: free memory plus what the kernel can reclaim, page cache
// included) is the host's view; inside a container with a memory limit the cgroup is the real
// bound, so the result is capped by the cgroup's limit minus its usage, not counting the
// cgroup's own file pages (page cache, reclaimable): cgroup v2 memory.max, memory.current and
// memory.stat's `file`, or v1 memory.limit_in_bytes, memory.usage_in_bytes and `cache`.

#include <cstdint>
#include <string_view>

namespace k3::model {

/// Bytes available to this process as described above; -1 when /proc/meminfo cannot be read.
[[nodiscard]] std::int64_t host_memory_available();

namespace detail {
/// MemAvailable from the text of /proc/meminfo, in bytes; -1 if absent.
[[nodiscard]] std::int64_t meminfo_available(std::string_view meminfo);
/// limit − (usage − reclaimable file bytes), at least 0; -1 when there is no limit ("max", an
/// empty or unparsable limit, or v1's "unlimited" sentinel ≥ 2^60). stat: the cgroup's
/// memory.stat text, whose `file` (v2) or `cache` (v1) line gives the reclaimable bytes.
[[nodiscard]] std::int64_t cgroup_headroom(std::string_view limit, std::string_view usage, std::string_view stat);
} // namespace detail

} // namespace k3::model
