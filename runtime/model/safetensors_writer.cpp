#include "runtime/model/safetensors_writer.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "runtime/chat/json.hpp"
#include "runtime/model/progress.hpp"

namespace k3::model {

std::int64_t tensor_spec::nbytes() const noexcept {
  std::int64_t n = dtype_size(type);
  for (auto d : shape) n *= d;
  return n;
}

int write_checkpoint(const std::string& dir, const std::vector<tensor_spec>& tensors, std::int64_t max_shard_bytes,
                     bool show) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // Assign shards in order.
  std::vector<std::vector<const tensor_spec*>> shards(1);
  std::int64_t cur = 0, total = 0;
  for (const auto& t : tensors) {
    if (cur > 0 && cur + t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(&t);
    cur += t.nbytes();
    total += t.nbytes();
  }
  const int N = static_cast<int>(shards.size());
  auto shard_name = [N](int i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, N);
    return std::string(buf);
  };

  progress_bar bar("writing", static_cast<std::int64_t>(tensors.size()), total, show);
  std::string weight_map;
  std::vector<std::uint8_t> buf;
  for (int s = 0; s < N; ++s) {
    std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
    std::int64_t off = 0;
    for (const auto* t : shards[s]) {
      header.append(",").append(json::quote(t->name)).append(":{\"dtype\":\"").append(dtype_name(t->type));
      header.append("\",\"shape\":[");
      for (std::size_t i = 0; i < t->shape.size(); ++i) {
        if (i) header.push_back(',');
        header.append(std::to_string(t->shape[i]));
      }
      header.append("],\"data_offsets\":[").append(std::to_string(off)).append(",");
      header.append(std::to_string(off + t->nbytes())).append("]}");
      off += t->nbytes();
      if (!weight_map.empty()) weight_map.append(",\n    ");
      weight_map.append(json::quote(t->name)).append(": \"").append(shard_name(s)).append("\"");
    }
    header += "}";
    // Pad the header (JSON allows trailing spaces) so that the data begins 64-byte aligned: the
    // tensors then start on cache lines wherever their sizes keep them there, and the kernels'
    // 64-byte loads do not straddle two lines (8-byte header length + header ≡ 0 mod 64).
    while ((8 + header.size()) % 64) header += ' ';
    const std::string path = (fs::path(dir) / shard_name(s)).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw checkpoint_error(path + ": cannot create");
    const std::uint64_t hlen = header.size();
    out.write(reinterpret_cast<const char*>(&hlen), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto* t : shards[s]) {
      buf.resize(static_cast<std::size_t>(t->nbytes()));
      t->fill(buf.data());
      out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
      bar.add(1, t->nbytes());
    }
    if (!out) throw checkpoint_error(path + ": write failed (disk full?)");
  }
  bar.finish();
  std::ofstream idx(fs::path(dir) / "model.safetensors.index.json", std::ios::trunc);
  idx << "{\n  \"metadata\": {\"total_size\": " << total << "},\n  \"weight_map\": {\n    " << weight_map << "\n  }\n}\n";
  if (!idx) throw checkpoint_error(dir + "/model.safetensors.index.json: write failed");
  return N;
}

} // namespace k3::model
