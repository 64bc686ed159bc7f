// `k3 run`: offline generation from a model directory, streaming text to stdout and printing
// prefill / decode throughput to stderr.
//
//   k3 run --model DIR (--prompt TEXT | --chat TEXT) [--system TEXT] [--no-thinking]
//          [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//          [--quantization mxfp4] [--prefill-chunk N] [--ignore-eos] [--print-ids]
//   k3 run --model DIR --tokens 1,2,3 --dump-logits FILE     raw fp32 [T, vocab] little-endian
//   k3 run --model DIR --image PATH [--image PATH …] [--chat TEXT]   a user turn with the images
//          first, then the text (K3 checkpoints with a vision tower)
//   k3 run --model DIR --image PATH … --dump-image-embeddings FILE   the projector outputs of the
//          images, fp32 little-endian [N_total, hidden], in order
//   engine mode (through the actors): add --expert-parallel-size N [--num-redundant-experts R]
//          or --remote-shards host:port,… (shards started with `k3 shard`), or --device cuda[:N]
//          (the model on that GPU through the CUDA executor; experts must be MXFP4)
//
// --prompt encodes TEXT as plain text (no special tokens); --chat renders one user turn with
// the model's chat format (K3 XTML, or the K2 envelope for Kimi Linear) and the generation
// prompt. Generation stops at the tokenizer's stop ids unless --ignore-eos.
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <memory>
#include <cstdio>
#include <mutex>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "config/cli_util.hpp"
#include "k3/engine.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "runtime/model/generate.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_path.hpp"
#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "runtime/vision/image.hpp"
#include "runtime/vision/vision_model.hpp"

namespace k3::app {
namespace {

std::vector<std::int32_t> parse_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      throw std::invalid_argument("--tokens expects comma-separated non-negative ids, got '" + item + "'");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  if (ids.empty()) throw std::invalid_argument("--tokens is empty");
  return ids;
}

} // namespace

void add_run_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("run", "Offline generation from a checkpoint (default: the built-in demo), streaming "
                                         "text to stdout and prefill / decode speed to stderr");
  struct opts {
    std::string model, prompt, chat, system, dump, tokens, device = "cpu", quantization, cache_dir, dump_images;
    std::vector<std::string> images;
    bool no_thinking = false, print_ids = false, mmap_weights = false;
    int ep = 0, redundant = 0;
    std::vector<std::string> remote;
    model::generate_options g;
  };
  auto o = std::make_shared<opts>();
  using CLI::Range;
  cmd->add_option("--model", o->model, "Checkpoint directory or local Hugging Face id (default: the demo checkpoint)");
  cmd->add_option("--cache-dir", o->cache_dir, "Where the demo checkpoint is written (default ~/.cache/k3serve)");
  cmd->add_option("--prompt", o->prompt, "Plain text prompt (no special tokens)");
  cmd->add_option("--chat", o->chat, "One user turn rendered with the model's chat format");
  cmd->add_option("--system", o->system, "A system message before --chat");
  k3::conf::add_bool(*cmd, "--no-thinking", o->no_thinking, "K3: answer without the thinking channel");
  cmd->add_option("--max-tokens", o->g.max_tokens, "Tokens to generate")->check(Range(1, 1 << 24));
  cmd->add_option("--temperature", o->g.sampling.temperature, "Sampling temperature (0: greedy)");
  cmd->add_option("--top-p", o->g.sampling.top_p, "Nucleus sampling");
  cmd->add_option("--top-k", o->g.sampling.top_k, "Top-k sampling (0: off)")->check(Range(0, 1 << 24));
  cmd->add_option("--min-p", o->g.sampling.min_p, "Min-p sampling");
  cmd->add_option("--seed", o->g.seed, "Sampling seed")->check(Range(std::uint64_t{0}, std::uint64_t{INT64_MAX}));
  cmd->add_option("--prefill-chunk", o->g.prefill_chunk, "Prompt tokens per step")->check(Range(1, 1 << 24));
  k3::conf::add_bool(*cmd, "--ignore-eos", o->g.ignore_eos, "Do not stop at the stop ids");
  k3::conf::add_bool(*cmd, "--print-ids", o->print_ids, "Print token ids instead of text");
  cmd->add_option("--tokens", o->tokens, "1,2,3: a prompt of token ids (with --dump-logits)");
  cmd->add_option("--dump-logits", o->dump, "Write fp32 [T, vocab] little-endian logits of --tokens to FILE");
  cmd->add_option("--image", o->images, "An image file (PNG, JPEG, WebP, GIF) placed before --chat's text; repeatable")
      ->check(CLI::ExistingFile);
  cmd->add_option("--dump-image-embeddings", o->dump_images,
                  "Write the --image files' projector outputs, fp32 little-endian [N_total, hidden], to FILE");
  cmd->add_option("--quantization", o->quantization, "mxfp4: quantize bf16 experts at load")->check(CLI::IsMember({"mxfp4"}));
  cmd->add_option("--expert-parallel-size", o->ep, "Engine mode: expert-shard actors")->check(Range(1, 1 << 16));
  cmd->add_option("--num-redundant-experts", o->redundant, "Engine mode: replicated hot experts")->check(Range(0, 1 << 16));
  cmd->add_option("--remote-shards", o->remote, "Engine mode: expert shards in `k3 shard` processes, host:port,...")
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (engine mode on that GPU)");
  k3::conf::add_bool(*cmd, "--mmap-weights", o->mmap_weights,
                     "Serve the weights from the checkpoint's memory mapping instead of copying them into huge-page memory");
  cmd->callback([o, &rc] {
    const std::string dir = model::resolve_model(o->model, o->cache_dir).dir;
    const std::string& prompt = o->prompt;
    const std::string& chat = o->chat;
    const std::string& system = o->system;
    const std::string& dump = o->dump;
    const std::string& tokens = o->tokens;
    const std::string& device = o->device;
    const bool thinking = !o->no_thinking, print_ids = o->print_ids;
    const int ep = o->ep, redundant = o->redundant;
    const auto& remote = o->remote;
    auto& g = o->g;
    model::load_options lo;
    lo.quantize_experts = o->quantization == "mxfp4";
    lo.copy_to_memory = !o->mmap_weights;
    if (!dump.empty() && tokens.empty()) throw std::invalid_argument("--dump-logits needs --tokens 1,2,3");
    const auto& images = o->images;
    if (!o->dump_images.empty() && images.empty()) throw std::invalid_argument("--dump-image-embeddings needs --image FILE");
    if (!images.empty() && !prompt.empty()) throw std::invalid_argument("--image goes with --chat (the chat format places it)");
    const bool images_only = !o->dump_images.empty() && chat.empty();
    if (dump.empty() && !images_only && prompt.empty() == chat.empty()) throw std::invalid_argument("give exactly one of --prompt or --chat");
    if (auto err = sampling::validate(g.sampling)) throw std::invalid_argument(*err);

    if (ep > 0 || !remote.empty() || device != "cpu") { // engine mode: the same request through the actor engine
      if (!dump.empty()) throw std::invalid_argument("--dump-logits runs offline; drop the shard flags");
      if (!images.empty()) throw std::invalid_argument("--image runs offline on the CPU; drop the engine flags");
      caf::actor_system_config cfg;
      llm_engine::add_types(cfg);
      caf::actor_system sys{cfg};
      engine_options eo;
      eo.model_dir = dir;
      eo.quantize_experts = lo.quantize_experts;
      eo.mmap_weights = o->mmap_weights;
      eo.expert_parallel_size = ep;
      eo.num_redundant_experts = redundant;
      eo.remote_shards = remote;
      eo.kv_memory_bytes = 256ll << 20;
      eo.kv_memory_bytes_explicit = true;
      eo.device = device;
      auto eng = llm_engine::start(sys, eo);
      std::fprintf(stderr, "k3 run: engine mode, %s\n", eng->sizing_note().c_str());
      generation_params gp;
      gp.max_tokens = g.max_tokens;
      gp.sampling = g.sampling;
      gp.seed = g.seed;
      gp.ignore_eos = g.ignore_eos;
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::string reason;
      auto sink = [&](const stream_event& ev) {
        if (print_ids && ev.token >= 0) std::printf("%d ", ev.token);
        else if (!print_ids) std::fputs(ev.text.c_str(), stdout);
        std::fflush(stdout);
        if (ev.finished) {
          std::lock_guard lock(mu);
          done = true;
          reason = ev.finish_reason + (ev.message.empty() ? "" : " (" + ev.message + ")");
          cv.notify_all();
        }
      };
      const auto r = chat.empty() ? eng->submit(eng->tokenizer().encode(prompt, false), gp, sink)
                                  : eng->submit_chat(chat, gp, sink);
      if (!r.ok()) throw std::runtime_error(std::string(engine::to_string(r.error)) + ": " + r.message);
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
      std::fputc('\n', stdout);
      const auto st = eng->stats();
      std::string rows;
      for (auto x : st.shard_rows) {
        if (!rows.empty()) rows.push_back(' ');
        rows.append(std::to_string(x));
      }
      std::fprintf(stderr, "k3 run: finish %s; %lld steps; rows per shard: %s\n", reason.c_str(),
                   static_cast<long long>(st.steps), rows.c_str());
      rc = 0;
      return;
    }

    // Images: decode, preprocess and encode before the text model loads (the dump needs no more).
    std::vector<float> image_rows;
    std::vector<vision::resize_plan> plans;
    std::vector<std::pair<int, int>> sizes;
    std::int64_t image_hidden = 0;
    if (!images.empty()) {
      const auto vm = vision::vision_model::load(dir);
      if (!vm) throw std::invalid_argument(dir + ": the checkpoint has no vision_config (no vision tower); --image needs one");
      std::vector<vision::pixel_patches> px;
      for (const auto& path : images) {
        std::ifstream in(path, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        vision::image img;
        try {
          img = vision::decode_image(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
        } catch (const vision::image_error& e) {
          throw std::invalid_argument(path + ": " + e.what());
        }
        plans.push_back(vision::plan_resize(img.width, img.height, vm->config.proc));
        sizes.emplace_back(img.width, img.height);
        px.push_back(vision::preprocess(img, vm->config.proc));
        std::fprintf(stderr, "k3 run: %s: %dx%d → %d×%d patches, %lld tokens\n", path.c_str(), img.width, img.height,
                     px.back().grid_h, px.back().grid_w, static_cast<long long>(plans.back().tokens));
      }
      const auto t0 = std::chrono::steady_clock::now();
      image_rows = vm->net->encode(px);
      std::fprintf(stderr, "k3 run: vision tower %.3f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      image_hidden = vm->config.text_hidden;
      if (!o->dump_images.empty()) {
        std::ofstream f(o->dump_images, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(image_rows.data()), static_cast<std::streamsize>(image_rows.size() * sizeof(float)));
        if (!f) throw std::runtime_error(o->dump_images + ": write failed");
        std::fprintf(stderr, "k3 run: wrote %lld x %lld fp32 image embeddings to %s\n",
                     static_cast<long long>(static_cast<std::int64_t>(image_rows.size()) / image_hidden),
                     static_cast<long long>(image_hidden), o->dump_images.c_str());
        if (images_only) {
          rc = 0;
          return;
        }
      }
    }

    std::vector<std::string> notes;
    auto m = model::model::load(dir, lo, &notes);
    for (const auto& n : notes) std::fprintf(stderr, "k3 run: %s\n", n.c_str());
    std::fprintf(stderr, "k3 run: %s\n", m->config().describe().c_str());
    if (lo.quantize_experts && !m->config().experts_mxfp4)
      std::fprintf(stderr, "k3 run: routed experts quantized to MXFP4 at load (OCP scale rule)\n");

    if (!dump.empty()) {
      const auto ids = parse_ids(tokens);
      auto seq = m->new_sequence();
      const model::batch_entry e{&seq, ids, true};
      const auto out = m->step({&e, 1});
      std::ofstream f(dump, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(out.logits.data()),
              static_cast<std::streamsize>(out.logits.size() * sizeof(float)));
      if (!f) throw std::runtime_error(dump + ": write failed");
      std::fprintf(stderr, "k3 run: wrote %zu x %lld fp32 logits to %s\n", ids.size(),
                   static_cast<long long>(out.vocab), dump.c_str());
      rc = 0;
      return;
    }

    const auto tk = tok::kimi_tokenizer::load(dir);
    if (tk.vocab_size() > m->config().vocab) // spec §12.9: ids past the embedding would be out of range
      throw std::runtime_error(dir + ": the tokenizer has " + std::to_string(tk.vocab_size()) +
                               " ids but config.json vocab_size is " + std::to_string(m->config().vocab));
    std::vector<std::int32_t> ids;
    if (!prompt.empty()) {
      ids = tk.encode(prompt, false);
    } else {
      chat::conversation conv;
      conv.thinking = thinking;
      auto turn = [&](const char* role, const std::string& text) {
        chat::message msg;
        msg.role = role;
        msg.content = text;
        conv.messages.push_back(std::move(msg));
      };
      if (!system.empty()) turn("system", system);
      turn("user", chat);
      if (!images.empty()) { // the images first, then the text, in one user message
        std::vector<chat::content_part> parts;
        for (std::size_t i = 0; i < images.size(); ++i) {
          chat::content_part cp{"image_url", "", images[i]};
          cp.media_w = sizes[i].first, cp.media_h = sizes[i].second, cp.media_tokens = plans[i].tokens;
          parts.push_back(cp);
        }
        parts.push_back({"text", chat});
        conv.messages.back().parts = std::move(parts);
      }
      const auto segs = m->config().fam == model::family::kimi_k3 ? chat::render_k3(conv) : chat::render_k2(conv);
      ids = tk.encode(segs);
    }
    if (ids.empty()) throw std::invalid_argument("the prompt encodes to no tokens");
    std::vector<model::embed_override> spans;
    if (!images.empty()) { // each image's rows go to its run of <|media_pad|> tokens, in order
      const std::int32_t pad = tk.id_of("<|media_pad|>");
      std::int64_t row = 0;
      std::size_t k = 0;
      for (std::size_t t = 0; t < ids.size(); ++t) {
        if (ids[t] != pad || (t > 0 && ids[t - 1] == pad)) continue;
        if (k >= plans.size()) throw std::runtime_error("more media placeholders than images");
        spans.push_back({static_cast<std::int64_t>(t), plans[k].tokens, image_rows.data() + row * image_hidden});
        row += plans[k++].tokens;
      }
      if (k != plans.size()) throw std::runtime_error("media placeholders do not match the images");
      if (image_hidden != m->config().hidden)
        throw std::runtime_error("vision_config.text_hidden_size differs from the text model's hidden size");
      g.embeds = spans;
    }

    tok::incremental_decoder dec(tk.bpe());
    const auto r = model::generate(*m, ids, tk.stop_ids, g, [&](std::int32_t id) {
      if (print_ids) std::printf("%d ", id);
      else std::fputs(dec.push(id).c_str(), stdout);
      std::fflush(stdout);
    });
    if (!print_ids) std::fputs(dec.flush().c_str(), stdout);
    std::fputc('\n', stdout);
    const double dec_tok = r.tokens.size() > 1 ? static_cast<double>(r.tokens.size() - 1) : 0.0;
    std::fprintf(stderr, "k3 run: prompt %lld tokens, prefill %.1f tok/s (%.3f s); generated %zu tokens, decode %.2f tok/s; finish %s\n",
                 static_cast<long long>(r.prompt_tokens), r.prompt_tokens / std::max(r.prefill_seconds, 1e-9),
                 r.prefill_seconds, r.tokens.size(), dec_tok / std::max(r.decode_seconds, 1e-9), r.finish_reason.c_str());
    rc = 0;
      return;
  });
}

} // namespace k3::app
