#pragma once
// Read-only access to a Hugging Face safetensors checkpoint: single `model.safetensors` or
// shards listed by `model.safetensors.index.json`, each file memory-mapped once.
//
// File format: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data
// buffer; offsets are relative to the buffer start. Everything is validated on open — header
// length within the file, JSON well formed, known dtype, shape × element size == end − begin,
// end within the file (a shorter file is reported as truncated), no two tensors overlapping —
// and every error is a checkpoint_error naming the file and, where there is one, the tensor.
//
// checkpoint keeps a "consumed" mark per tensor so the loader can prove that it used every
// tensor (strict audit, spec §12.2): take() marks, unconsumed() lists what is left.
//
// Lifetime: tensor data pointers stay valid while the checkpoint lives (the mappings and the
// in-memory copies are owned by it). Not thread-safe for take() and copy_to_memory(); reads of
// tensor data are.

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3::model {

struct checkpoint_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// e8m0: safetensors' F8_E8M0 (one exponent byte, bias 127): what some MXFP4 exports use for
/// the block scales; byte-identical to U8 scales, accepted wherever those are.
enum class dtype { bf16, f16, f32, u8, e8m0 };
[[nodiscard]] const char* dtype_name(dtype t) noexcept;
[[nodiscard]] int dtype_size(dtype t) noexcept;

struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::int64_t nbytes = 0;
  const std::string* file = nullptr; ///< path of the shard holding it
  [[nodiscard]] std::int64_t numel() const noexcept;
  [[nodiscard]] std::string shape_str() const;
};

/// One memory-mapped file (RAII), optionally with an in-memory copy of the parts in use.
class mapped_file {
public:
  explicit mapped_file(const std::string& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  [[nodiscard]] const std::uint8_t* data() const noexcept { return data_; }
  [[nodiscard]] std::int64_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Whether p points into the file mapping.
  [[nodiscard]] bool maps(const std::uint8_t* p) const noexcept { return p >= data_ && p < data_ + size_; }

  /// Copies the mapped bytes [p, p + n) (inside the mapping) into anonymous memory and returns
  /// where they now live; the file pages wholly inside the range are unmapped (they stay in the
  /// page cache, which the kernel may reclaim). The copy region is reserved once per file (its
  /// size, untouched parts cost nothing), 2 MiB-aligned and advised for transparent huge pages,
  /// and shifted so that the safetensors data buffer starts on a 64-byte boundary. Why: decode
  /// reads every weight once per token, and from page-cache pages each 4 KiB page costs a TLB
  /// miss the hardware prefetchers stop at (two-level walks in a VM); the routed experts (small
  /// matrices) read at ~0.6 of the rate they reach from huge pages on a 2-vCPU Zen 5 VM.
  /// Throws checkpoint_error if the memory cannot be reserved.
  const std::uint8_t* copy_to_memory(const std::uint8_t* p, std::int64_t n);

private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::int64_t size_ = 0;
  void* copy_map_ = nullptr;     // the anonymous reservation (munmap'd with copy_len_)
  std::size_t copy_len_ = 0;
  std::uint8_t* copy_ = nullptr; // file byte i lives at copy_[i]
};

/// Parses and validates one safetensors file's header; appends its tensors.
void read_safetensors_header(const mapped_file& file, std::vector<tensor_info>& out);
/// The same over bytes in memory; `path` names them in errors and must outlive `out`.
void parse_safetensors(const std::uint8_t* bytes, std::int64_t size, const std::string& path, std::vector<tensor_info>& out);
/// `model.safetensors.index.json`: tensor -> shard file; appends the distinct shard names to
/// `files` (plain names inside the model directory only). `where` names the file in errors.
[[nodiscard]] std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& where,
                                                                         std::vector<std::string>& files);

class checkpoint {
public:
  /// Opens `<dir>/model.safetensors.index.json` (sharded) or `<dir>/model.safetensors`.
  [[nodiscard]] static checkpoint open(const std::string& dir);

  [[nodiscard]] const tensor_info* find(const std::string& name) const;
  /// The tensor, marked consumed. Throws checkpoint_error "missing tensor NAME" if absent.
  const tensor_info& take(const std::string& name);
  /// take() that returns nullptr when absent (optional tensors).
  const tensor_info* take_optional(const std::string& name);
  /// Marks a tensor consumed without using it (skip lists).
  void skip(const std::string& name);
  /// Moves a tensor's bytes into memory (mapped_file::copy_to_memory) and returns it with `data`
  /// pointing there; a tensor already moved is returned as is. Throws if the tensor is absent.
  const tensor_info& copy_to_memory(const std::string& name);

  [[nodiscard]] std::vector<std::string> unconsumed() const;
  [[nodiscard]] const std::map<std::string, tensor_info>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] std::int64_t total_bytes() const noexcept { return total_bytes_; }
  [[nodiscard]] const std::vector<std::unique_ptr<mapped_file>>& files() const noexcept { return files_; }

private:
  std::vector<std::unique_ptr<mapped_file>> files_;
  std::map<std::string, tensor_info> tensors_;
  std::map<std::string, bool> consumed_;
  std::int64_t total_bytes_ = 0;
};

} // namespace k3::model
