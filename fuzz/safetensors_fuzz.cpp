// libFuzzer: the safetensors header parser (as if the bytes were a shard file) and the
// model.safetensors.index.json parser. Only checkpoint_error may escape; every tensor accepted
// must lie inside the buffer and have a byte count matching its shape.
#include "fuzz/fuzz_util.hpp"
#include "runtime/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "fuzz.safetensors";
  std::vector<k3::model::tensor_info> out;
  try {
    k3::model::parse_safetensors(data, static_cast<std::int64_t>(size), path, out);
    for (const auto& t : out) {
      K3_FUZZ_CHECK(t.data >= data && t.data + t.nbytes <= data + size);
      K3_FUZZ_CHECK(t.nbytes == t.numel() * k3::model::dtype_size(t.type));
    }
  } catch (const k3::model::checkpoint_error&) {
  }
  try {
    std::vector<std::string> files;
    const auto map = k3::model::parse_safetensors_index(std::string(reinterpret_cast<const char*>(data), size), "index.json", files);
    for (const auto& [tensor, file] : map) K3_FUZZ_CHECK(file.find('/') == std::string::npos && file.find("..") == std::string::npos);
  } catch (const k3::model::checkpoint_error&) {
  }
  return 0;
}
