// Real HTTP against a real `k3 serve` (the demo model) on 127.0.0.1.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <thread>

#include "runtime/chat/json.hpp"
#include "runtime/model/make_model.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/net/http_client.hpp"
#include "tests/support/child_process.hpp"

using namespace k3;
using test::http_request;

namespace {

struct server {
  explicit server(std::vector<std::string> extra = {}) : dir("srv") {
    model::make_model({}, dir.str());
    std::vector<std::string> args = {K3_BINARY, "serve", "--model", dir.str(), "--port", "0", "--served-model-name",
                                      "Kimi-K3", "--max-model-len", "2048", "--kv-cache-memory", "67108864"};
    args.insert(args.end(), extra.begin(), extra.end());
    proc = std::make_unique<test::child_process>(args);
    port = proc->port_after("127.0.0.1");
    INFO(proc->line());
    REQUIRE(port > 0);
  }
  test::temp_dir dir;
  std::unique_ptr<test::child_process> proc;
  int port = 0;
};

json::value parse(const std::string& s) { return json::parse(s); }

std::string error_param(const test::http_response& r) {
  const auto v = parse(r.body);
  const auto* e = v.find("error");
  REQUIRE(e != nullptr);
  REQUIRE(e->find("message") != nullptr);
  REQUIRE(e->find("type") != nullptr);
  const auto* p = e->find("param");
  return p && p->is_string() ? p->s : "";
}

const std::string chat_hi = R"({"model":"Kimi-K3","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0})";

} // namespace

TEST_CASE("server: endpoints, streaming order and the OpenAI error shape", "[net]") {
  server s;
  SECTION("health, models, version, metrics") {
    CHECK(http_request(s.port, "GET", "/health").status == 200);
    const auto m = http_request(s.port, "GET", "/v1/models");
    REQUIRE(m.status == 200);
    CHECK(parse(m.body).find("data")->items[0].find("id")->s == "Kimi-K3");
    CHECK(parse(m.body).find("data")->items[0].find("max_model_len")->s == "2048");
    const auto met = http_request(s.port, "GET", "/metrics");
    CHECK(met.status == 200);
    CHECK(met.body.find("k3:num_requests_running") != std::string::npos);
    CHECK(met.body.find("k3:time_to_first_token_seconds_bucket") != std::string::npos);
  }
  SECTION("chat completion, non-streaming") {
    const auto r = http_request(s.port, "POST", "/v1/chat/completions", chat_hi);
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    CHECK(v.find("object")->s == "chat.completion");
    const auto& ch = v.find("choices")->items.at(0);
    CHECK(ch.find("finish_reason")->s == "length");
    CHECK(ch.find("message")->find("role")->s == "assistant");
    CHECK(v.find("usage")->find("completion_tokens")->s == "6");
    // Thinking is on by default: six tokens of a random model stay inside the think channel.
    CHECK(ch.find("message")->find("reasoning_content") != nullptr);
  }
  SECTION("chat streaming: role chunk, deltas, finish chunk, usage chunk, [DONE]") {
    const auto r = http_request(s.port, "POST", "/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"stream":true,"stream_options":{"include_usage":true}})");
    REQUIRE(r.status == 200);
    CHECK(r.headers.at("content-type") == "text/event-stream");
    const auto ev = r.sse_data();
    REQUIRE(ev.size() >= 4u);
    CHECK(ev.back() == "[DONE]");
    const auto first = parse(ev.front());
    CHECK(first.find("choices")->items[0].find("delta")->find("role")->s == "assistant");
    const auto usage = parse(ev[ev.size() - 2]);
    CHECK(usage.find("choices")->items.empty());
    CHECK(usage.find("usage")->find("completion_tokens")->s == "5");
    const auto fin = parse(ev[ev.size() - 3]);
    CHECK(fin.find("choices")->items[0].find("finish_reason")->s == "length");
    std::string id;
    for (std::size_t i = 0; i + 1 < ev.size(); ++i) {
      const auto c = parse(ev[i]);
      if (id.empty()) id = c.find("id")->s;
      CHECK(c.find("id")->s == id); // one id for the whole stream
    }
  }
  SECTION("logprobs: chat content entries with top alternatives; completions arrays") {
    const auto r = http_request(s.port, "POST", "/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"logprobs":true,"top_logprobs":3})");
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    const auto& entries = v.find("choices")->items[0].find("logprobs")->find("content")->items;
    REQUIRE(entries.size() == 4u);
    for (const auto& e : entries) {
      const double lp = std::strtod(e.find("logprob")->s.c_str(), nullptr);
      CHECK(lp <= 0.0);
      const auto& top = e.find("top_logprobs")->items;
      REQUIRE(top.size() == 3u);
      // Greedy: the chosen token is the most likely one.
      CHECK(std::strtod(top[0].find("logprob")->s.c_str(), nullptr) == Approx(lp).margin(1e-6));
      CHECK(!e.find("bytes")->items.empty());
    }
    const auto c = http_request(s.port, "POST", "/v1/completions", R"({"prompt":"Hello","max_tokens":3,"temperature":0,"logprobs":2})");
    REQUIRE(c.status == 200);
    const auto cv = parse(c.body);
    const auto* lp = cv.find("choices")->items[0].find("logprobs");
    CHECK(lp->find("tokens")->items.size() == 3u);
    CHECK(lp->find("token_logprobs")->items.size() == 3u);
    CHECK(lp->find("top_logprobs")->items[0].members.size() == 2u);
    const auto bad = http_request(s.port, "POST", "/v1/chat/completions",
                                  R"({"messages":[{"role":"user","content":"Hi"}],"top_logprobs":3})");
    CHECK(bad.status == 400);
    CHECK(error_param(bad) == "top_logprobs");
  }
  SECTION("n > 1: one choice per index, usage summed, streamed choices interleave") {
    const auto r = http_request(s.port, "POST", "/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"n":3,"temperature":1.0,"seed":5})");
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    const auto& ch = v.find("choices")->items;
    REQUIRE(ch.size() == 3u);
    for (std::size_t i = 0; i < 3; ++i) CHECK(ch[i].find("index")->s == std::to_string(i));
    CHECK(v.find("usage")->find("completion_tokens")->s == "12");
    const auto st = http_request(s.port, "POST", "/v1/completions",
                                 R"({"prompt":"Hi","max_tokens":3,"n":2,"stream":true,"stream_options":{"include_usage":true}})");
    INFO("status " << st.status << " body " << st.body);
    const auto ev = st.sse_data();
    REQUIRE(ev.size() >= 3u);
    CHECK(ev.back() == "[DONE]");
    CHECK(parse(ev[ev.size() - 2]).find("usage")->find("completion_tokens")->s == "6");
    int finals[2] = {0, 0};
    for (std::size_t i = 0; i + 2 < ev.size(); ++i) {
      const auto c = parse(ev[i]);
      const auto& choice = c.find("choices")->items.at(0);
      if (choice.find("finish_reason")->is_string()) ++finals[std::stoi(choice.find("index")->s)];
    }
    CHECK(finals[0] == 1);
    CHECK(finals[1] == 1);
    CHECK(http_request(s.port, "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"n":0})").status == 400);
  }
  SECTION("completions, tokenize, detokenize") {
    const auto r = http_request(s.port, "POST", "/v1/completions", R"({"prompt":"Hello","max_tokens":4,"temperature":0})");
    REQUIRE(r.status == 200);
    CHECK(parse(r.body).find("object")->s == "text_completion");
    CHECK(parse(r.body).find("usage")->find("prompt_tokens")->s != "0");
    const auto t = http_request(s.port, "POST", "/tokenize", R"({"prompt":"Hello world"})");
    REQUIRE(t.status == 200);
    const auto tv = parse(t.body);
    std::string arr;
    for (const auto& x : tv.find("tokens")->items) {
      if (!arr.empty()) arr += ",";
      arr += x.s;
    }
    const auto d = http_request(s.port, "POST", "/detokenize", "{\"tokens\":[" + arr + "]}");
    REQUIRE(d.status == 200);
    CHECK(parse(d.body).find("prompt")->s == "Hello world");
    // /tokenize, /v1/chat/completions/render and chat completions render and count alike.
    const std::string chat_body =
        R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi there","name":"ann"}],"tools":[{"type":"function","function":{"name":"f"}}],"max_tokens":1})";
    const auto tk = parse(http_request(s.port, "POST", "/tokenize", chat_body).body);
    const auto rd = parse(http_request(s.port, "POST", "/v1/chat/completions/render", chat_body).body);
    const auto cc = parse(http_request(s.port, "POST", "/v1/chat/completions", chat_body).body);
    CHECK(tk.find("prompt_tokens")->s == cc.find("usage")->find("prompt_tokens")->s);
    CHECK(rd.find("prompt_tokens")->s == cc.find("usage")->find("prompt_tokens")->s);
    CHECK(rd.find("token_ids")->items.size() == tk.find("tokens")->items.size());
    CHECK(std::stoi(tk.find("count")->s) == std::stoi(tk.find("prompt_tokens")->s) + 3); // K3's generation opener
    CHECK(rd.find("prompt")->s.find("<|open|>message role=\"user\" name=\"ann\"<|sep|>Hi there") != std::string::npos);
  }
  SECTION("bad input: each a 400 naming the field, 404 for the model") {
    auto post = [&](const std::string& b) { return http_request(s.port, "POST", "/v1/chat/completions", b); };
    auto r = post(R"({"messages":[{"role":"user","content":"Hi"})");
    CHECK(r.status == 400);
    CHECK(r.body.find("not valid JSON") != std::string::npos);
    r = post(R"({"messages":"hello"})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "messages");
    r = post(R"({"model":"Kimi-K3"})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "messages");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"temperature":"hot"})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "temperature");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"top_p":0})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "top_p");
    r = post(R"({"messages":[{"role":"wizard","content":"Hi"}]})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "messages[0].role");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokns":5})"); // a typo is not silently dropped
    CHECK(r.status == 400);
    CHECK(error_param(r) == "max_tokns");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"user":"u-1"})"); // OpenAI's opaque tag
    CHECK(r.status == 200);
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"continuous_usage_stats":true}})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "stream_options.continuous_usage_stats");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"thinkin":false}})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "chat_template_kwargs.thinkin");
    r = http_request(s.port, "POST", "/v1/completions", R"({"prompt":"Hi","temprature":0})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "temprature");
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"n":99})");
    CHECK(r.status == 400);
    CHECK(error_param(r) == "n");
    r = post("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}");
    CHECK(r.status == 400);
    CHECK(r.body.find("UTF-8") != std::string::npos);
    r = post(R"({"model":"gpt-4","messages":[{"role":"user","content":"Hi"}]})");
    CHECK(r.status == 404);
    r = post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":5000})");
    CHECK(r.status == 400);
    CHECK(r.body.find("maximum context length is 2048 tokens") != std::string::npos);
    CHECK(r.body.find("5000 in the completion") != std::string::npos);
    r = post(R"({"model":"Kimi-K3","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"https://example.com/photo.jpg"}}]}],"max_tokens":512})");
    CHECK(r.status == 400);
    // This checkpoint has no vision tower: a clear 400 naming the part, never a silent drop.
    CHECK(r.body.find("takes no images") != std::string::npos);
    CHECK(r.body.find("messages[0].content[1].image_url") != std::string::npos);
    CHECK(http_request(s.port, "GET", "/v1/nothing").status == 404);
    CHECK(http_request(s.port, "GET", "/v1/chat/completions").status == 405);
  }
  SECTION("client disconnect mid-stream cancels the request and frees its cache") {
    test::raw_connection c(s.port);
    const std::string body =
        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1500,"temperature":0,"ignore_eos":true,"stream":true})";
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    c.read_until("\"role\""); // the role chunk comes with the first token, whatever its text
    c.close();
    // The next steps see the closed socket; poll the figures.
    std::string m;
    const bool freed = test::metrics_show(s.port,
                                          {"k3:kda_state_slots_used{model_name=\"Kimi-K3\"} 0",
                                           "k3:http_requests_client_disconnected_total{model_name=\"Kimi-K3\"} 1"},
                                          60000, &m);
    INFO(m);
    CHECK(freed);
  }
}

TEST_CASE("server: limits — auth, body size, queue full, drain on SIGTERM", "[net]") {
  SECTION("API key: 401 without it, /health stays public") {
    server s({"--api-key", "sekrit"});
    CHECK(http_request(s.port, "GET", "/health").status == 200);
    CHECK(http_request(s.port, "GET", "/v1/models").status == 401);
    CHECK(http_request(s.port, "GET", "/v1/models", "", {"Authorization: Bearer wrong"}).status == 401);
    CHECK(http_request(s.port, "GET", "/v1/models", "", {"Authorization: Bearer sekrit"}).status == 200);
  }
  SECTION("body over the limit is 413; a full queue is 429 with Retry-After") {
    server s({"--max-body-bytes", "4096", "--max-num-seqs", "1", "--max-queued-requests", "1"});
    const auto big = http_request(s.port, "POST", "/v1/chat/completions", std::string(8000, ' '));
    CHECK(big.status == 413);
    const std::string slow =
        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1800,"temperature":0,"ignore_eos":true,"stream":true})";
    test::raw_connection a(s.port), b(s.port);
    auto req = [&](const std::string& body) {
      return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    };
    a.send(req(slow));
    a.read_until("\"role\""); // running (the role chunk comes with the first token)
    b.send(req(slow));
    b.read_until("\r\n\r\n"); // admitted (waiting)
    const auto c = http_request(s.port, "POST", "/v1/chat/completions", slow);
    CHECK(c.status == 429);
    CHECK(c.headers.count("retry-after") == 1);
    CHECK(c.body.find("queue_full") != std::string::npos);
  }
  SECTION("SIGTERM drains the in-flight request and exits 0") {
    server s;
    test::raw_connection a(s.port);
    const std::string body = R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":300,"ignore_eos":true,"stream":true})";
    a.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    a.read_until("\"role\""); // generating (the role chunk comes with the first token)
    s.proc->signal(SIGTERM);
    const auto all = a.read_until("data: [DONE]");
    CHECK(all.find("\"finish_reason\":\"length\"") != std::string::npos); // finished, not cut
    CHECK(s.proc->wait() == 0);
  }
}

TEST_CASE("server: --int8-activations serves greedy chat completions, alone and with two expert shards", "[net]") {
  for (const auto& extra : {std::vector<std::string>{"--int8-activations"},
                            std::vector<std::string>{"--int8-activations", "--expert-parallel-size", "2"}}) {
    server s(extra);
    const auto r = http_request(s.port, "POST", "/v1/chat/completions", chat_hi);
    INFO(r.body);
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    const auto& choice = v.find("choices")->items.at(0);
    CHECK(choice.find("finish_reason")->s == "length");
    CHECK(v.find("usage")->find("completion_tokens")->s == "6");
  }
}

TEST_CASE("server: launch lines — flags that cannot take effect are start-up errors", "[net]") {
  test::temp_dir d("flags");
  model::make_model({}, d.str());
  // Each run is its own child process (killed by its destructor): never signal by name, other
  // tests' servers run in parallel under ctest -j.
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {K3_BINARY, "serve", "--model", d.str(), "--port", "0"});
    test::child_process p(args, true);
    return p.read_until("listening on");
  };
  // Plan A's vLLM line: parses, but TP 8 cannot take effect without GPUs.
  auto out = run({"--tensor-parallel-size", "8", "--expert-parallel-size", "8", "--max-model-len", "131072", "--dtype", "auto",
                  "--gpu-memory-utilization", "0.95", "--trust-remote-code"});
  CHECK(out.find("--tensor-parallel-size 8 cannot take effect") != std::string::npos);
  // Plan B's SGLang spelling.
  out = run({"--tp", "16", "--ep", "16", "--context-length", "524288", "--quantization", "mxfp4", "--trust-remote-code",
             "--host", "127.0.0.1"});
  CHECK(out.find("--tensor-parallel-size 16 cannot take effect") != std::string::npos);
  out = run({"--pipeline-parallel-size", "3"});
  CHECK(out.find("--pipeline-parallel-size 3 cannot take effect") != std::string::npos);
  out = run({"--dtype", "float16"});
  CHECK(out.find("--dtype float16 is not supported") != std::string::npos);
  out = run({"--enable-chunked-prefill", "false"});
  CHECK(out.find("--enable-chunked-prefill false cannot take effect") != std::string::npos);
  out = run({"--no-such-flag", "1"});
  CHECK(out.find("unknown option '--no-such-flag'") != std::string::npos);
  // --device: bad names, combinations the CUDA backend excludes, and a clear refusal where
  // there is no GPU (or no CUDA backend in this build) instead of a crash.
  out = run({"--device", "tpu"});
  CHECK(out.find("--device tpu is not supported (cpu, cuda or cuda:N)") != std::string::npos);
  out = run({"--device", "cuda", "--tp", "2", "--quantization", "mxfp4"}); // a TP group of 2 GPUs where they exist
  CHECK((out.find("no CUDA device visible") != std::string::npos || out.find("GPUs;") != std::string::npos ||
         out.find("no CUDA backend") != std::string::npos || out.find("needs NCCL") != std::string::npos ||
         out.find("listening on") != std::string::npos));
  out = run({"--device", "cuda", "--int8-activations"});
  CHECK(out.find("--int8-activations cannot take effect with --device cuda") != std::string::npos);
  out = run({"--device", "cuda:0", "--expert-parallel-size", "2"});
  CHECK(out.find("--expert-parallel-size 2 with --device cuda: the experts are partitioned over the 1 tensor-parallel GPUs") !=
        std::string::npos);
  out = run({"--device", "cuda", "--quantization", "mxfp4"}); // starts only where a GPU is visible
  CHECK((out.find("no CUDA device visible") != std::string::npos || out.find("no CUDA backend") != std::string::npos ||
         out.find("listening on") != std::string::npos));
  {
    std::ofstream(d.str() + "/bad.yaml") << "max-num-seqs: 4\nbogus-key: 1\n";
    out = run({"--config", d.str() + "/bad.yaml"});
    CHECK(out.find("bad.yaml:2: unknown option '--bogus-key'") != std::string::npos);
  }
  // The same plan with TP 1 starts (EP 2 = two expert-shard actors on this machine).
  out = run({"--tensor-parallel-size", "1", "--expert-parallel-size", "2", "--max-model-len", "4096", "--dtype", "auto",
             "--trust-remote-code", "--enable-chunked-prefill"});
  CHECK(out.find("listening on") != std::string::npos);
}

TEST_CASE("server: --simulate PLAN streams placeholder tokens at the modeled pace, --simulate and launch-line errors", "[net]") {
  SECTION("plan A pacing and KV pools") {
    server s({"--simulate", "A"});
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = http_request(s.port, "POST", "/v1/completions", R"({"prompt":"Hello","max_tokens":20})");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    CHECK(v.find("usage")->find("completion_tokens")->s == "20");
    CHECK(v.find("choices")->items[0].find("text")->s.size() > 10); // placeholder words, not a model's
    // Plan A at batch 1 takes ~10 ms per modeled decode step; the server waits for each, so 20
    // tokens take at least ~0.2 s (a lower bound only: the machine may be slower, never faster).
    CHECK(secs >= 0.15);
    const auto m = http_request(s.port, "GET", "/metrics").body;
    CHECK(m.find("k3:kda_state_slots_total{model_name=\"Kimi-K3\"} 256") != std::string::npos);
  }
  SECTION("a bad plan is a start-up error naming it") {
    test::temp_dir d("simbad");
    model::make_model({}, d.str());
    test::child_process p({K3_BINARY, "serve", "--model", d.str(), "--port", "0", "--simulate", "Z"}, true);
    CHECK(p.read_until("listening on").find("not a built-in plan") != std::string::npos);
  }
}

TEST_CASE("server: per-expert counts in /metrics feed `k3 sim --routing counts:FILE`", "[net]") {
  // Without expert parallelism the model executor publishes the counts (k3 serve's default).
  {
    server plain;
    REQUIRE(http_request(plain.port, "POST", "/v1/completions", R"({"prompt":"Hello","max_tokens":4,"temperature":0})").status == 200);
    const auto m = http_request(plain.port, "GET", "/metrics").body;
    CHECK(m.find("k3:expert_tokens_total{model_name=\"Kimi-K3\",expert=\"0\"}") != std::string::npos);
  }
  server s({"--expert-parallel-size", "2"});
  REQUIRE(http_request(s.port, "POST", "/v1/completions", R"({"prompt":"Hello there","max_tokens":8,"temperature":0})").status == 200);
  const auto m = http_request(s.port, "GET", "/metrics").body;
  REQUIRE(m.find("k3:expert_tokens_total{model_name=\"Kimi-K3\",expert=\"0\"}") != std::string::npos);
  const std::string file = s.dir.str() + "/metrics.prom";
  std::ofstream(file) << m;
  const std::string cmd = std::string(K3_BINARY) + " sim --plan '--tp 2 --ep 2' --hardware h100 --model " + s.dir.str() +
                          " --routing counts:" + file + " --workload closed:2 --num-requests 4 --output-len 8 > " + s.dir.str() + "/sim.txt 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  std::ifstream in(s.dir.str() + "/sim.txt");
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(out);
  CHECK(out.find("recorded counts") != std::string::npos);
}

namespace {

/// One agent session against `port`: a long system prompt, then turns that echo the previous
/// reply (reasoning_content and all), a tool call with its result, and a new user message.
/// Returns each turn's reply message (as JSON text) and its usage.cached_tokens.
std::vector<std::pair<std::string, std::int64_t>> agent_session(int port) {
  std::string system = "You are a coding agent working in a large repository. ";
  for (int i = 0; i < 12; ++i) system += "Rule " + std::to_string(i) + ": read the file before you change it, and run the tests after. ";
  std::string messages = R"([{"role":"system","content":)" + json::quote(system) + R"(},{"role":"user","content":"Find the failing test."}])";
  const std::string tools =
      R"([{"type":"function","function":{"name":"run","description":"Run a shell command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}])";
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (int turn = 0; turn < 4; ++turn) {
    const auto r = http_request(port, "POST", "/v1/chat/completions",
                                R"({"model":"Kimi-K3","messages":)" + messages + R"(,"tools":)" + tools +
                                    R"(,"max_tokens":12,"temperature":0})");
    REQUIRE(r.status == 200);
    const auto v = parse(r.body);
    const auto& msg = v.find("choices")->items.at(0).find("message");
    REQUIRE(msg != nullptr);
    const auto* details = v.find("usage")->find("prompt_tokens_details");
    REQUIRE(details != nullptr);
    out.emplace_back(json::dump(*msg, {.compact = true, .sort_keys = true}), std::stoll(details->find("cached_tokens")->s));
    // Echo the reply as the client would (content, reasoning_content, any tool calls).
    std::string assistant = R"({"role":"assistant","content":)" + json::quote(msg->find("content") && msg->find("content")->is_string() ? msg->find("content")->s : "");
    if (const auto* rc = msg->find("reasoning_content"); rc && rc->is_string()) assistant += R"(,"reasoning_content":)" + json::quote(rc->s);
    std::string call_id = "call_" + std::to_string(turn);
    // Every other turn the agent called the tool; its result follows.
    if (turn % 2 == 0)
      assistant += R"(,"tool_calls":[{"id":")" + call_id + R"(","type":"function","function":{"name":"run","arguments":"{\"cmd\":\"make test\"}"}}])";
    assistant += "}";
    messages.pop_back(); // ']'
    messages += "," + assistant;
    if (turn % 2 == 0) messages += R"(,{"role":"tool","tool_call_id":")" + call_id + R"(","content":"3 tests failed: test_a, test_b, test_c"})";
    messages += R"(,{"role":"user","content":"Turn )" + std::to_string(turn + 2) + R"(: fix the next one and explain."}])";
  }
  return out;
}

} // namespace

TEST_CASE("server: multi-turn agent sessions give the same greedy replies with the prefix cache on and off", "[net]") {
  // Reference numerics, so that served-from-cache and computed-from-scratch agree to rounding.
  std::vector<std::pair<std::string, std::int64_t>> on, off;
  {
    server s({"--exact-fp32", "--block-size", "16"});
    on = agent_session(s.port);
    const auto m = http_request(s.port, "GET", "/metrics").body;
    CHECK(m.find("k3:prefix_cache_queries_total{") != std::string::npos);
    CHECK(m.find("k3:prefix_cache_hits_total{model_name=\"Kimi-K3\"} 0") == std::string::npos);
    CHECK(m.find("k3:kda_checkpoints{") != std::string::npos);
  }
  {
    server s({"--exact-fp32", "--block-size", "16", "--no-enable-prefix-caching"});
    off = agent_session(s.port);
  }
  REQUIRE(on.size() == off.size());
  for (std::size_t t = 0; t < on.size(); ++t) {
    INFO("turn " << t + 1);
    CHECK(on[t].first == off[t].first);
    CHECK(off[t].second == 0);
    if (t == 0) CHECK(on[t].second == 0);
    else CHECK(on[t].second > 100); // the whole system prompt and earlier turns, at least
  }
}
