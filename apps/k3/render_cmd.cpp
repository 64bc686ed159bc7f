// `k3 render`: the prompt a chat request renders to, for debugging templates. Reads an OpenAI
// chat-completions body (a file, or stdin), renders it with the model's chat format (K3 XTML or
// the K2 envelope of Kimi Linear) exactly as the server does, and prints the prompt with special
// tokens spelled out; --ids prints the token ids instead (what the model sees), --segments one
// JSON line per segment ({"control": bool, "text": ...}: control segments may hold special
// tokens, text segments never do).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "config/cli_util.hpp"
#include "net/openai_request.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model_path.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::app {

void add_render_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("render", "Render a chat request to the model's prompt (special tokens spelled out), "
                                            "its token ids, or its segments");
  struct opts {
    std::string model, cache_dir, file;
    bool ids = false, segments = false;
  };
  auto o = std::make_shared<opts>();
  cmd->add_option("request", o->file, "A chat-completions request body (JSON); default: stdin");
  cmd->add_option("--model", o->model, "Checkpoint directory or local Hugging Face id (default: the demo checkpoint)");
  cmd->add_option("--cache-dir", o->cache_dir, "Where the demo checkpoint is written");
  k3::conf::add_bool(*cmd, "--ids", o->ids, "Print the token ids (space-separated)");
  k3::conf::add_bool(*cmd, "--segments", o->segments, "Print one JSON line per segment");
  cmd->callback([o, &rc] {
    std::string text;
    if (o->file.empty() || o->file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(o->file, std::ios::binary);
      if (!in) throw std::invalid_argument("cannot read " + o->file);
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    const std::string dir = model::resolve_model(o->model, o->cache_dir).dir;
    const auto cfg = model::load_config(dir);
    const bool k3 = cfg.fam == model::family::kimi_k3;
    std::vector<tok::segment> segs;
    try {
      const auto req = net::parse_chat(net::parse_body(text), k3, false);
      segs = k3 ? chat::render_k3(req.conv) : chat::render_k2(req.conv);
    } catch (const net::api_error& e) {
      throw std::invalid_argument(e.message);
    }
    if (o->ids) {
      const auto tk = tok::kimi_tokenizer::load(dir);
      const auto ids = tk.encode(segs);
      std::string out;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(' ');
        out.append(std::to_string(ids[i]));
      }
      std::printf("%s\n", out.c_str());
    } else if (o->segments) {
      for (const auto& s : segs)
        std::printf("{\"control\": %s, \"text\": %s}\n", s.control ? "true" : "false", json::quote(s.text).c_str());
    } else {
      const std::string joined = chat::join(segs);
      std::fwrite(joined.data(), 1, joined.size(), stdout);
      std::fputc('\n', stdout);
    }
    rc = 0;
  });
}

} // namespace k3::app
