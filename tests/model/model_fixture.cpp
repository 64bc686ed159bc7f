#include "tests/model/model_fixture.hpp"

#include <fstream>

#include "runtime/chat/json.hpp"

namespace k3::test {

namespace {
const char* shard = "model-00001-of-00001.safetensors";
}

std::vector<raw_tensor> read_all(const std::string& dir) {
  model::mapped_file f(dir + "/" + shard);
  std::vector<model::tensor_info> infos;
  model::read_safetensors_header(f, infos);
  std::vector<raw_tensor> out;
  for (const auto& t : infos)
    out.push_back({t.name, model::dtype_name(t.type), t.shape, std::vector<std::uint8_t>(t.data, t.data + t.nbytes), 0});
  return out;
}

void write_all(const std::string& dir, const std::vector<raw_tensor>& tensors) {
  std::string header = "{";
  std::int64_t off = 0;
  std::string map;
  for (const auto& t : tensors) {
    if (header.size() > 1) header += ",";
    header += json::quote(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header.push_back(',');
      header.append(std::to_string(t.shape[i]));
    }
    const auto n = static_cast<std::int64_t>(t.bytes.size());
    header += "],\"data_offsets\":[" + std::to_string(off + t.offset_shift) + "," +
              std::to_string(off + n + t.offset_shift) + "]}";
    off += n;
    if (!map.empty()) map += ",";
    map += json::quote(t.name) + ":\"" + shard + "\"";
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream out(dir + "/" + shard, std::ios::binary | std::ios::trunc);
  const std::uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  std::ofstream idx(dir + "/model.safetensors.index.json", std::ios::trunc);
  idx << "{\"metadata\":{\"total_size\":" << off << "},\"weight_map\":{" << map << "}}";
}

} // namespace k3::test
