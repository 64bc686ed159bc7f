// Config parsing and the strict checkpoint loader, on checkpoints written by make_model.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/common/bf16.hpp"

#include "kernels/mxfp4/mxfp4_format.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/host_memory.hpp"
#include "runtime/model/model.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "tests/model/model_fixture.hpp"

using namespace k3;
using k3::test::raw_tensor;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

/// Expects parse_config of the K3 fixture's config with one edit to fail mentioning `needle`.
void config_rejects(const std::string& base, const std::string& from, const std::string& to, const std::string& needle) {
  INFO("edit: " << from << " -> " << to);
  try {
    (void)model::parse_config(replace_once(base, from, to), "config.json");
    FAIL("accepted");
  } catch (const model::config_error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

/// Loads dir expecting a checkpoint_error (or config_error) whose message contains every needle.
void load_rejects(const std::string& dir, std::initializer_list<std::string> needles) {
  try {
    (void)model::model::load(dir, {.progress = 0});
    FAIL("loaded");
  } catch (const std::runtime_error& e) {
    INFO(e.what());
    for (const auto& n : needles) CHECK(std::string(e.what()).find(n) != std::string::npos);
  }
}

raw_tensor& find(std::vector<raw_tensor>& v, const std::string& name) {
  for (auto& t : v)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return v[0];
}

} // namespace

TEST_CASE("config: K3 and Kimi Linear fixtures parse with every feature detected", "[model]") {
  test::temp_dir d3("cfg3"), dl("cfgl");
  model::make_model(test::tiny_options(model::family::kimi_k3), d3.str());
  model::make_model(test::tiny_options(model::family::kimi_linear), dl.str());
  const auto c = model::load_config(d3.str());
  CHECK(c.fam == model::family::kimi_k3);
  CHECK(c.tensor_prefix == "language_model.");
  CHECK(c.num_layers == 5);
  CHECK(c.layer_is_kda == std::vector<bool>{true, true, true, false, false}); // 1-based lists [4, 5]
  CHECK(c.layer_is_moe == std::vector<bool>{false, true, true, true, true});
  CHECK(c.bounded_gate);
  CHECK(c.gate_lower_bound == -5.0f);
  CHECK(c.full_rank_gate);
  CHECK(c.mla_output_gate);
  CHECK(c.q_lora_rank == 48);
  CHECK(c.routed_hidden == 64);
  CHECK(c.latent_norm);
  CHECK(c.act == model::activation::situ);
  CHECK(c.situ_linear_beta == 25.0f);
  CHECK(c.attn_res_block == 2);
  CHECK(c.experts_mxfp4);
  CHECK(c.eos_id == 768 - 256 + 2);

  const auto l = model::load_config(dl.str());
  CHECK(l.fam == model::family::kimi_linear);
  CHECK(l.tensor_prefix.empty());
  CHECK(l.q_lora_rank == 0);
  CHECK_FALSE(l.bounded_gate);
  CHECK_FALSE(l.full_rank_gate);
  CHECK_FALSE(l.experts_mxfp4);
  CHECK_FALSE(l.attn_res());
  CHECK(l.act == model::activation::silu);
  CHECK(l.routed_scaling == Approx(2.446f));
}

TEST_CASE("config: inconsistent or unsupported keys are rejected by name", "[model]") {
  test::temp_dir d("cfgbad");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  const auto base = slurp(d.str() + "/config.json");
  config_rejects(base, "\"model_type\": \"kimi_k3\"", "\"model_type\": \"llama\"", "model_type");
  config_rejects(base, "\"full_attn_layers\": [4, 5]", "\"full_attn_layers\": [3, 4, 5]", "in both lists");
  config_rejects(base, "\"full_attn_layers\": [4, 5]", "\"full_attn_layers\": [4]", "layer 5 is in neither");
  config_rejects(base, "\"full_attn_layers\": [4, 5]", "\"full_attn_layers\": [4, 6]", "outside 1..5");
  config_rejects(base, "\"hidden_act\": \"situ\"", "\"hidden_act\": \"gelu\"", "text_config.hidden_act");
  config_rejects(base, "\"gate_lower_bound\": -5.0", "\"gate_lower_bound\": 2.0", "gate_lower_bound");
  config_rejects(base, "\"num_experts_per_token\": 2", "\"num_experts_per_token\": 9", "num_experts_per_token");
  config_rejects(base, "\"format\": \"mxfp4-pack-quantized\"", "\"format\": \"nvfp4-pack-quantized\"",
                 "quantization_config.format");
  config_rejects(base, "\"mla_use_nope\": true", "\"mla_use_nope\": false", "mla_use_nope");
  config_rejects(base, "\"hidden_size\": 128", "\"hidden_size\": \"big\"", "text_config.hidden_size");
  config_rejects(base, "\"routed_expert_hidden_size\": 64", "\"routed_expert_hidden_size\": 40",
                 "routed_expert_hidden_size");
  config_rejects(base, "\"eos_token_id\": 514", "\"eos_token_id\": 99999", "eos_token_id");
  config_rejects(base, "\"moe_router_activation_func\": \"sigmoid\"", "\"moe_router_activation_func\": \"softmax\"",
                 "moe_router_activation_func");
  CHECK_THROWS_WITH(model::parse_config("{not json", "x.json"), Catch::Contains("x.json: not valid JSON"));
  CHECK_THROWS_WITH(model::load_config(d.str() + "/nope"), Catch::Contains("cannot open"));
}

TEST_CASE("loader: make_model round trip binds every tensor with its real shape", "[model]") {
  for (auto fam : {model::family::kimi_k3, model::family::kimi_linear}) {
    for (bool conv2d : {false, true}) {
      INFO("family " << static_cast<int>(fam) << " conv2d " << conv2d);
      test::temp_dir d("rt");
      auto o = test::tiny_options(fam);
      o.conv_2d = conv2d;
      o.max_shard_bytes = 1 << 20; // force several shards
      model::make_model(o, d.str());
      int shards = 0;
      for (const auto& e : std::filesystem::directory_iterator(d.path()))
        shards += e.path().extension() == ".safetensors";
      CHECK(shards > 1);
      auto m = model::model::load(d.str(), {.progress = 0});
      const auto& c = m->config();
      const auto& w = m->weights();
      CHECK(w.layers.size() == 5u);
      CHECK(w.layers[0].kda_w.a_log.size() == 2u); // K3's padded [128] narrowed to the heads
      CHECK(w.layers[0].kda_w.conv.size() == 3u * 64 * 4);
      CHECK(w.layers[3].mla_w.kv_b.size() == static_cast<std::size_t>(2 * (16 + 16) * 32));
      CHECK(w.layers[1].moe_w.experts.size() == 6u);
      CHECK(w.layers[1].moe_w.experts[0].w1.mxfp4 == (fam == model::family::kimi_k3));
      if (fam == model::family::kimi_k3) {
        CHECK(w.out_res_w.size() == 128u);
        CHECK(w.layers[1].moe_w.latent_down.rows == 64);
        CHECK_FALSE(w.layers[0].kda_w.g.empty());
        CHECK_FALSE(w.layers[3].mla_w.g.empty());
      } else {
        CHECK(w.out_res_w.empty());
        CHECK_FALSE(w.layers[0].kda_w.g_a.empty());
        CHECK(w.layers[3].mla_w.g.empty());
      }
      CHECK(model::active_weight_bytes(w, c) > 0);
      // The tokenizer files load too, with the specials where the config says.
      const auto tk = tok::kimi_tokenizer::load(d.str());
      CHECK(tk.vocab_size() == 768);
      CHECK(tk.eos_id == c.eos_id);
      CHECK(tk.id_of(fam == model::family::kimi_k3 ? "<|open|>" : "<|im_user|>") == 512 + 3);
    }
  }
}

TEST_CASE("loader: Kimi Linear bf16 experts quantized at load equal the OCP quantizer", "[model]") {
  test::temp_dir d("quant");
  model::make_model(test::tiny_options(model::family::kimi_linear), d.str());
  auto plain = model::model::load(d.str(), {.progress = 0});
  auto q = model::model::load(d.str(), {.quantize_experts = true, .progress = 0});
  const auto& dense = plain->weights().layers[2].moe_w.experts[3].w2.d;
  const auto& mx = q->weights().layers[2].moe_w.experts[3].w2;
  REQUIRE(mx.mxfp4);
  std::vector<float> f(static_cast<std::size_t>(dense.rows * dense.cols));
  for (std::int64_t r = 0; r < dense.rows; ++r) dense.row(r, f.data() + r * dense.cols);
  const auto ref = mxfp4::quantize_matrix(f.data(), dense.rows, dense.cols);
  CHECK(std::equal(ref.packed.begin(), ref.packed.end(), mx.q.packed));
  CHECK(std::equal(ref.scales.begin(), ref.scales.end(), mx.q.scales));
}

TEST_CASE("loader: every corruption is a clear error naming file and tensor", "[model]") {
  test::temp_dir d("bad");
  const auto fam = model::family::kimi_k3;
  model::make_model(test::tiny_options(fam), d.str());
  const auto good = test::read_all(d.str());
  const std::string shard = "model-00001-of-00001.safetensors";
  const std::string L = "language_model.model.layers.";
  auto with = [&](const std::function<void(std::vector<raw_tensor>&)>& edit) {
    auto t = good;
    edit(t);
    test::write_all(d.str(), t);
  };

  SECTION("missing tensor") {
    with([&](auto& t) { t.erase(t.begin() + 5); });
    load_rejects(d.str(), {"missing tensor", good[5].name});
  }
  SECTION("extra tensor") {
    with([&](auto& t) { t.push_back({L + "0.self_attn.surprise.weight", "BF16", {2}, {0, 0, 0, 0}, 0}); });
    load_rejects(d.str(), {shard, "unexpected tensor", "surprise"});
  }
  SECTION("vision tensors are skipped with a note") {
    with([&](auto& t) { t.push_back({"vision_tower.patch_embed.weight", "BF16", {2}, {0, 0, 0, 0}, 0}); });
    std::vector<std::string> notes;
    auto m = model::model::load(d.str(), {.progress = 0}, &notes);
    REQUIRE(notes.size() == 1u);
    CHECK(notes[0] == "skipped 1 vision tensors");
  }
  SECTION("mis-shaped tensor") {
    with([&](auto& t) { std::swap(find(t, L + "0.self_attn.o_proj.weight").shape[0], find(t, L + "0.self_attn.o_proj.weight").shape[1]); });
    load_rejects(d.str(), {shard, L + "0.self_attn.o_proj.weight", "has shape [64, 128]", "expected [128, 64]"});
  }
  SECTION("wrong dtype") {
    with([&](auto& t) {
      auto& x = find(t, L + "0.self_attn.q_proj.weight");
      x.dtype = "U8";
      x.shape[1] *= 2;
    });
    load_rejects(d.str(), {"q_proj.weight", "U8"});
  }
  SECTION("unsupported dtype") {
    with([&](auto& t) { find(t, L + "0.input_layernorm.weight").dtype = "I16"; });
    load_rejects(d.str(), {shard, "input_layernorm.weight", "dtype I16 is not supported"});
  }
  SECTION("byte count disagrees with the shape") {
    with([&](auto& t) { find(t, L + "1.post_attention_layernorm.weight").shape = {10}; });
    load_rejects(d.str(), {"post_attention_layernorm.weight", "data_offsets span"});
  }
  SECTION("out-of-range offset") {
    with([&](auto& t) { t.back().offset_shift = 1 << 20; });
    load_rejects(d.str(), {shard, good.back().name, "truncated or out-of-range"});
  }
  SECTION("overlapping tensors") {
    with([&](auto& t) { t[3].offset_shift = -2; });
    load_rejects(d.str(), {"overlap"});
  }
  SECTION("truncated file") {
    const auto p = d.path() / shard;
    std::filesystem::resize_file(p, std::filesystem::file_size(p) - 100);
    load_rejects(d.str(), {shard, "truncated"});
  }
  SECTION("corrupt header") {
    const auto p = (d.path() / shard).string();
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("\x01\x02\x03", 3);
    f.close();
    load_rejects(d.str(), {shard, "corrupt header"});
  }
  SECTION("header length beyond the file") {
    const auto p = (d.path() / shard).string();
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint64_t huge = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
    f.close();
    load_rejects(d.str(), {shard, "corrupt header", "does not fit"});
  }
  SECTION("NaN MXFP4 scale") {
    with([&](auto& t) { find(t, L + "2.block_sparse_moe.experts.4.w3.weight_scale").bytes[7] = 0xFF; });
    load_rejects(d.str(), {"experts.4.w3.weight_scale", "NaN scale"});
  }
  SECTION("missing MXFP4 scale") {
    with([&](auto& t) {
      std::erase_if(t, [&](const raw_tensor& x) { return x.name == L + "1.block_sparse_moe.experts.0.w1.weight_scale"; });
    });
    load_rejects(d.str(), {"experts.0.w1.weight_scale is missing"});
  }
  SECTION("A_log padding that is not zero") {
    with([&](auto& t) {
      auto& a = find(t, L + "1.self_attn.A_log");
      const float one = 1.0f;
      std::memcpy(a.bytes.data() + 4 * 100, &one, 4);
    });
    load_rejects(d.str(), {"A_log", "entry 100 is not 0"});
  }
  SECTION("A_log of the wrong shape") {
    with([&](auto& t) {
      auto& a = find(t, L + "1.self_attn.A_log");
      a.shape = {2, 64};
    });
    load_rejects(d.str(), {"A_log", "has shape [2, 64]"});
  }
  SECTION("index names a missing shard") {
    auto idx = slurp(d.str() + "/model.safetensors.index.json");
    std::ofstream(d.str() + "/model.safetensors.index.json") << replace_once(idx, shard, "model-00009-of-00009.safetensors");
    load_rejects(d.str(), {"model-00009-of-00009.safetensors", "missing"});
  }
  SECTION("tensor absent from the index") {
    with([](auto&) {});
    auto idx = slurp(d.str() + "/model.safetensors.index.json");
    const std::string entry = "\"" + good[0].name + "\":\"" + shard + "\",";
    std::ofstream(d.str() + "/model.safetensors.index.json") << replace_once(idx, entry, "");
    load_rejects(d.str(), {good[0].name, "not listed in model.safetensors.index.json"});
  }
  SECTION("no checkpoint at all") {
    std::filesystem::remove(d.path() / shard);
    std::filesystem::remove(d.path() / "model.safetensors.index.json");
    load_rejects(d.str(), {"no model.safetensors"});
  }
}

TEST_CASE("loader: MXFP4 scales stored as F8_E8M0 load like U8 ones", "[model]") {
  test::temp_dir d("e8m0");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  const std::vector<std::int32_t> toks = {5, 77, 300, 12};
  auto logits = [&] {
    auto m = model::model::load(d.str(), {.progress = 0});
    auto s = m->new_sequence();
    const model::batch_entry e{&s, toks, true};
    return m->step({&e, 1}).logits;
  };
  const auto before = logits();
  auto t = test::read_all(d.str());
  int changed = 0;
  for (auto& x : t)
    if (x.name.size() > 13 && x.name.substr(x.name.size() - 13) == ".weight_scale") {
      CHECK(x.dtype == "U8");
      x.dtype = "F8_E8M0";
      ++changed;
    }
  REQUIRE(changed > 0);
  test::write_all(d.str(), t);
  CHECK(logits() == before);
  // A packed weight in F8_E8M0 is still refused by name.
  auto packed = std::find_if(t.begin(), t.end(), [](const raw_tensor& x) {
    return x.name.size() > 14 && x.name.substr(x.name.size() - 14) == ".weight_packed";
  });
  REQUIRE(packed != t.end());
  packed->dtype = "F8_E8M0";
  test::write_all(d.str(), t);
  load_rejects(d.str(), {packed->name, "F8_E8M0", "expected U8"});
}

TEST_CASE("loader: F16 and F32 tensors load to the same model as BF16", "[model]") {
  test::temp_dir d("dtypes");
  model::make_model(test::tiny_options(model::family::kimi_linear), d.str());
  const std::vector<std::int32_t> toks = {5, 77, 300, 12, 600};
  auto logits = [&] {
    auto m = model::model::load(d.str(), {.progress = 0, .exact_fp32 = true});
    auto s = m->new_sequence();
    const model::batch_entry e{&s, toks, true};
    return m->step({&e, 1}).logits;
  };
  const auto before = logits();
  auto t = test::read_all(d.str());
  auto widen = [](raw_tensor& x, bool to_f16) {
    std::vector<std::uint8_t> out;
    for (std::size_t i = 0; i < x.bytes.size(); i += 2) {
      std::uint16_t h;
      std::memcpy(&h, &x.bytes[i], 2);
      const float f = bf16_to_f32(h);
      if (to_f16) { // exact for these magnitudes: f16 keeps 10 mantissa bits ≥ bf16's 7
        std::uint32_t b;
        std::memcpy(&b, &f, 4);
        const int e = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
        REQUIRE(((e > 0 && e < 31) || f == 0.0f));
        const std::uint16_t r = f == 0.0f ? static_cast<std::uint16_t>((b >> 16) & 0x8000)
                                          : static_cast<std::uint16_t>(((b >> 16) & 0x8000) | (e << 10) | ((b >> 13) & 0x3ff));
        out.push_back(static_cast<std::uint8_t>(r & 0xff));
        out.push_back(static_cast<std::uint8_t>(r >> 8));
      } else {
        const auto* p = reinterpret_cast<const std::uint8_t*>(&f);
        out.insert(out.end(), p, p + 4);
      }
    }
    x.bytes = std::move(out);
    x.dtype = to_f16 ? "F16" : "F32";
  };
  widen(find(t, "model.layers.0.self_attn.q_proj.weight"), false);
  widen(find(t, "model.layers.2.block_sparse_moe.experts.1.w2.weight"), false);
  widen(find(t, "model.layers.0.input_layernorm.weight"), true);
  widen(find(t, "model.layers.3.self_attn.kv_b_proj.weight"), true);
  test::write_all(d.str(), t);
  const auto after = logits();
  REQUIRE(after.size() == before.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    num += (after[i] - before[i]) * (after[i] - before[i]);
    den += before[i] * before[i];
  }
  CHECK(std::sqrt(num / den) <= 1e-5);
}

TEST_CASE("loader: weights copied into memory equal the file's bytes, cache-line aligned, same logits", "[model]") {
  test::temp_dir d("copy");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  // Rewrite the shard with its header padded to 8 bytes only, as Hugging Face writes them, and a
  // skippable tensor whose name length puts the data buffer off a cache line, so that the copy's
  // shift is exercised.
  const auto tensors = test::read_all(d.str());
  for (std::string name = "model.rotary_emb.inv_freq";; name += "_") {
    auto t = tensors;
    t.push_back({name, "F32", {4}, std::vector<std::uint8_t>(16, 0)});
    test::write_all(d.str(), t);
    auto ck = model::checkpoint::open(d.str());
    std::uint64_t header = 0;
    std::memcpy(&header, ck.files()[0]->data(), 8);
    if ((8 + header) % 64 != 0) break;
  }
  const std::vector<std::int32_t> toks = {5, 77, 300, 12, 600, 9};
  auto logits = [&](bool copy) {
    auto m = model::model::load(d.str(), {.progress = 0, .copy_to_memory = copy, .exact_fp32 = true});
    // The model reads its matrices and experts from the copy (or from the mapping without it).
    const auto& w = m->weights();
    const auto& ex = w.layers[1].moe_w.experts[0];
    REQUIRE(ex.w1.mxfp4);
    for (const void* p : {static_cast<const void*>(w.embed.bf16), static_cast<const void*>(ex.w1.q.packed),
                          static_cast<const void*>(ex.w1.q.scales)}) {
      bool mapped = false;
      for (const auto& f : m->ckpt().files()) mapped = mapped || f->maps(static_cast<const std::uint8_t*>(p));
      CHECK(mapped == !copy);
    }
    auto s = m->new_sequence();
    const model::batch_entry e{&s, toks, true};
    return m->step({&e, 1}).logits;
  };
  const auto mapped = logits(false), copied = logits(true);
  REQUIRE(mapped.size() == copied.size());
  for (std::size_t i = 0; i < mapped.size(); ++i) REQUIRE(copied[i] == mapped[i]);

  auto ck = model::checkpoint::open(d.str());
  int checked = 0;
  for (const auto& [name, info] : ck.tensors()) {
    if (info.nbytes == 0) continue;
    const std::uint8_t* before = info.data;
    const model::mapped_file* file = nullptr;
    for (const auto& f : ck.files())
      if (f->maps(before)) file = f.get();
    REQUIRE(file);
    std::uint64_t header = 0;
    std::memcpy(&header, file->data(), 8);
    const std::vector<std::uint8_t> bytes(before, before + info.nbytes);
    const auto& t = ck.copy_to_memory(name);
    INFO(name);
    CHECK(t.data != before);
    for (const auto& f : ck.files()) CHECK_FALSE(f->maps(t.data));
    CHECK(std::memcmp(t.data, bytes.data(), bytes.size()) == 0);
    // The data buffer starts on a cache line in the copy: offsets keep their residue mod 64.
    const std::int64_t offset = before - (file->data() + 8 + header);
    CHECK(reinterpret_cast<std::uintptr_t>(t.data) % 64 == static_cast<std::uintptr_t>(offset % 64));
    CHECK(ck.copy_to_memory(name).data == t.data); // a second call keeps the copy
    ++checked;
  }
  CHECK(checked > 10);
}

TEST_CASE("host memory: MemAvailable capped by a cgroup limit less its usage, page cache not counted", "[model]") {
  using model::detail::cgroup_headroom;
  using model::detail::meminfo_available;
  CHECK(meminfo_available("MemTotal:       24684576 kB\nMemFree:        21352448 kB\nMemAvailable:   24250368 kB\n") ==
        24250368ll * 1024);
  CHECK(meminfo_available("MemTotal: 1 kB\n") == -1);
  CHECK(meminfo_available("") == -1);
  CHECK(meminfo_available("MemAvailableX: 5 kB\nMemAvailable: 7 kB\n") == 7 * 1024); // whole key only
  // cgroup v2: limit 8 GiB, 6 GiB charged of which 4 GiB page cache → 6 GiB left.
  CHECK(cgroup_headroom("8589934592\n", "6442450944\n", "anon 2147483648\nfile 4294967296\nkernel 1\n") ==
        6ll << 30);
  CHECK(cgroup_headroom("max\n", "6442450944\n", "file 1\n") == -1); // no limit
  CHECK(cgroup_headroom("", "", "") == -1);                             // no cgroup files
  // cgroup v1: its unlimited sentinel, and `cache` for the page cache.
  CHECK(cgroup_headroom("9223372036854771712\n", "100\n", "cache 50\n") == -1);
  CHECK(cgroup_headroom("1000\n", "900\n", "cache 300\nrss 600\n") == 400);
  CHECK(cgroup_headroom("1000\n", "1500\n", "") == 0); // over the limit: nothing left, not negative
  // This machine: something positive, and never more than /proc/meminfo says.
  const std::int64_t here = model::host_memory_available();
  CHECK(here > 0);
}
