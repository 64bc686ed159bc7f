// Forward-pass invariances and the pinned greedy continuation, on make_model checkpoints.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/common/cpu_features.hpp"
#include "runtime/model/generate.hpp"
#include "runtime/model/model.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

/// Largest relative L2 difference between corresponding rows.
double max_row_rel(std::span<const float> a, std::span<const float> b, std::int64_t vocab) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t r = 0; r < a.size() / static_cast<std::size_t>(vocab); ++r) {
    double num = 0, den = 0;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const double x = a[r * vocab + i], y = b[r * vocab + i];
      num += (x - y) * (x - y);
      den += x * x;
    }
    worst = test::nan_max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

std::vector<std::int32_t> random_tokens(std::uint64_t seed, int n, int vocab) {
  test::rng r(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = r.below(vocab);
  return t;
}

/// Logits of every token, fed in chunks of the given sizes (cycled).
std::vector<float> logits_in_chunks(model::model& m, const std::vector<std::int32_t>& toks, std::vector<int> sizes) {
  auto seq = m.new_sequence(8); // small blocks so chunks straddle block boundaries
  std::vector<float> all;
  std::size_t p = 0, i = 0;
  while (p < toks.size()) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(sizes[i++ % sizes.size()]), toks.size() - p);
    const model::batch_entry e{&seq, {toks.data() + p, n}, true};
    const auto out = m.step({&e, 1});
    all.insert(all.end(), out.logits.begin(), out.logits.end());
    p += n;
  }
  return all;
}

struct fixture {
  explicit fixture(model::family f, bool exact = true) : dir(f == model::family::kimi_k3 ? "fwd3" : "fwdl") {
    model::make_model(test::tiny_options(f), dir.str());
    m = model::model::load(dir.str(), {.progress = 0, .exact_fp32 = exact});
  }
  test::temp_dir dir;
  std::unique_ptr<model::model> m;
};

} // namespace

TEST_CASE("forward: error reductions propagate NaN (a poisoned output fails every bound)", "[model]") {
  const std::int64_t vocab = 8;
  std::vector<float> good(3 * vocab, 1.0f), poisoned = good;
  CHECK(max_row_rel(good, good, vocab) == 0.0);
  poisoned[vocab + 3] = std::nanf("");
  CHECK_FALSE(max_row_rel(poisoned, good, vocab) <= 1e-4);
  std::fill(poisoned.begin(), poisoned.end(), std::nanf("")); // all-NaN logits
  CHECK_FALSE(max_row_rel(poisoned, good, vocab) <= 1e-4);
  CHECK_FALSE(test::max_abs_diff(std::span<const float>(poisoned), std::span<const float>(good)) <= 1.0);
  CHECK(std::isnan(test::nan_max(0.0, std::nan(""))));
  CHECK(std::isnan(test::nan_max(std::nan(""), 1.0)));
  CHECK(test::nan_max(1.0, 2.0) == 2.0);
}

TEST_CASE("forward: one prefill = chunked prefill = token-by-token decode", "[model]") {
  // 97 tokens: the one-shot prefill takes the sgemm path (m > 64), decode the GEMV path.
  for (auto fam : {model::family::kimi_k3, model::family::kimi_linear}) {
    INFO("family " << static_cast<int>(fam));
    fixture f(fam);
    const auto toks = random_tokens(11, 97, f.m->config().vocab);
    const auto once = logits_in_chunks(*f.m, toks, {1000});
    const auto chunked = logits_in_chunks(*f.m, toks, {7, 16, 3, 20});
    const auto decode = logits_in_chunks(*f.m, toks, {1});
    const auto V = f.m->config().vocab;
    for (float x : once) REQUIRE(std::isfinite(x));
    CHECK(max_row_rel(chunked, once, V) <= 1e-4);
    CHECK(max_row_rel(decode, once, V) <= 1e-4);
    // Logits are not degenerate: rows differ and have spread.
    double spread = 0;
    for (std::int64_t i = 0; i < V; ++i) spread += std::abs(once[i] - once[V + i]);
    CHECK(spread / V > 1e-3);
  }
}

TEST_CASE("forward: replaced input rows (image features) are placed by absolute position across chunks", "[model]") {
  fixture f(model::family::kimi_k3);
  const auto V = f.m->config().vocab;
  const auto Hd = f.m->config().hidden;
  const auto toks = random_tokens(5, 40, V);
  // Two "images": rows for positions [6, 6+9) and [20, 20+4) (distinct random features).
  test::rng r(9);
  const auto rows = r.normals(static_cast<std::size_t>(13 * Hd));
  const std::vector<model::embed_override> spans{{6, 9, rows.data()}, {20, 4, rows.data() + 9 * Hd}};
  auto run = [&](std::vector<int> sizes, bool with_rows) {
    auto seq = f.m->new_sequence(8);
    std::vector<float> all;
    std::size_t p = 0, i = 0;
    while (p < toks.size()) {
      const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(sizes[i++ % sizes.size()]), toks.size() - p);
      model::batch_entry e{&seq, {toks.data() + p, n}, true};
      if (with_rows) e.embeds = spans;
      const auto out = f.m->step({&e, 1});
      all.insert(all.end(), out.logits.begin(), out.logits.end());
      p += n;
    }
    return all;
  };
  const auto once = run({1000}, true);
  const auto chunked = run({5, 3, 11}, true); // chunks cut through both spans
  const auto decode = run({1}, true);
  const auto plain = run({1000}, false);
  CHECK(max_row_rel(chunked, once, V) <= 1e-4);
  CHECK(max_row_rel(decode, once, V) <= 1e-4);
  // Before the first span the rows change nothing; from it on they do.
  const std::span<const float> a(once), b(plain);
  CHECK(max_row_rel(a.first(static_cast<std::size_t>(6 * V)), b.first(static_cast<std::size_t>(6 * V)), V) == 0.0);
  CHECK(max_row_rel(a.subspan(static_cast<std::size_t>(6 * V), static_cast<std::size_t>(V)),
                    b.subspan(static_cast<std::size_t>(6 * V), static_cast<std::size_t>(V)), V) > 1e-3);
}

TEST_CASE("forward: a sequence's logits are the same alone or batched with others", "[model]") {
  for (auto fam : {model::family::kimi_k3, model::family::kimi_linear}) {
    INFO("family " << static_cast<int>(fam));
    fixture f(fam);
    auto& m = *f.m;
    const int V = m.config().vocab;
    const auto a = random_tokens(1, 30, V), b = random_tokens(2, 19, V), c = random_tokens(3, 9, V);
    // Alone: prompt minus its last 3 tokens, then 3 single-token decode steps.
    auto alone = [&](const std::vector<std::int32_t>& t) {
      std::vector<float> rows;
      auto s = m.new_sequence();
      const model::batch_entry e{&s, {t.data(), t.size() - 3}, false};
      auto out = m.step({&e, 1});
      rows.insert(rows.end(), out.logits.begin(), out.logits.end());
      for (std::size_t i = t.size() - 3; i < t.size(); ++i) {
        const model::batch_entry d{&s, {t.data() + i, 1}, false};
        out = m.step({&d, 1});
        rows.insert(rows.end(), out.logits.begin(), out.logits.end());
      }
      return rows;
    };
    const auto ra = alone(a), rb = alone(b), rc = alone(c);

    // Batched: step 1 mixes three prefills; steps 2–4 decode all three together (the batched
    // recurrent path), with a fourth unrelated sequence prefilling in step 3.
    auto sa = m.new_sequence(), sb = m.new_sequence(), sc = m.new_sequence(), sd = m.new_sequence();
    const auto other = random_tokens(4, 25, V);
    std::vector<float> ba, bb, bc;
    auto keep = [&](const model::step_output& o, std::size_t i, std::vector<float>& dst) {
      const auto r = o.last(i);
      dst.insert(dst.end(), r.begin(), r.end());
    };
    {
      const model::batch_entry e[3] = {{&sb, {b.data(), b.size() - 3}, false},
                                       {&sa, {a.data(), a.size() - 3}, false},
                                       {&sc, {c.data(), c.size() - 3}, false}};
      const auto o = m.step(e);
      keep(o, 1, ba), keep(o, 0, bb), keep(o, 2, bc);
    }
    for (int k = 3; k >= 1; --k) {
      std::vector<model::batch_entry> e = {{&sa, {a.data() + a.size() - k, 1}, false},
                                           {&sb, {b.data() + b.size() - k, 1}, false},
                                           {&sc, {c.data() + c.size() - k, 1}, false}};
      if (k == 2) e.insert(e.begin() + 1, {&sd, {other.data(), other.size()}, true});
      const auto o = m.step(e);
      const std::size_t shift = k == 2 ? 1 : 0;
      keep(o, 0, ba), keep(o, 1 + shift, bb), keep(o, 2 + shift, bc);
    }
    CHECK(max_row_rel(ba, ra, V) <= 1e-4);
    CHECK(max_row_rel(bb, rb, V) <= 1e-4);
    CHECK(max_row_rel(bc, rc, V) <= 1e-4);
    // Routing figures: every token of every MoE layer went to top_k experts.
    for (const auto& layer : m.expert_tokens()) {
      std::int64_t s = 0;
      for (auto n : layer) s += n;
      CHECK(s % m.config().top_k == 0);
      CHECK(s > 0);
    }
  }
}

TEST_CASE("forward: production numerics (bf16 cache and expert outputs) stay close across step shapes", "[model]") {
  // With bf16 roundings a 1e-7 difference can flip one rounding; the effect stays ~1e-3.
  for (auto fam : {model::family::kimi_k3, model::family::kimi_linear}) {
    INFO("family " << static_cast<int>(fam));
    fixture f(fam, false);
    const auto toks = random_tokens(12, 40, f.m->config().vocab);
    const auto once = logits_in_chunks(*f.m, toks, {1000});
    const auto decode = logits_in_chunks(*f.m, toks, {1});
    CHECK(max_row_rel(decode, once, f.m->config().vocab) <= 1e-2);
  }
}

TEST_CASE("forward: bad batches are rejected before any state changes", "[model]") {
  fixture f(model::family::kimi_k3);
  auto s = f.m->new_sequence();
  const std::vector<std::int32_t> bad = {1, 2, 768};
  const model::batch_entry e{&s, bad, false};
  CHECK_THROWS_WITH(f.m->step({&e, 1}), Catch::Contains("token id 768 at position 2 is outside the vocabulary"));
  CHECK(s.pos == 0);
  const std::vector<std::int32_t> ok = {1, 2};
  const model::batch_entry twice[2] = {{&s, ok, false}, {&s, ok, false}};
  CHECK_THROWS_WITH(f.m->step(twice), Catch::Contains("reuses a sequence state"));
  const model::batch_entry empty{&s, {}, false};
  CHECK_THROWS_WITH(f.m->step({&empty, 1}), Catch::Contains("has no tokens"));
  CHECK(s.pos == 0);
}

TEST_CASE("forward: greedy continuation of the seeded demo checkpoint is pinned", "[model]") {
  // The demo checkpoint (default make-model options, seed 0) under the scalar kernels, so the
  // pin does not depend on which SIMD path this CPU takes.
  test::temp_dir d("golden");
  model::make_model({}, d.str());
  const scoped_isa scalar(isa::scalar);
  auto m = model::model::load(d.str(), {.progress = 0});
  const auto tk = tok::kimi_tokenizer::load(d.str());
  const auto prompt = tk.encode("The quick brown fox", false);
  model::generate_options g;
  g.max_tokens = 12;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  const auto r = model::generate(*m, prompt, tk.stop_ids, g);
  std::string got;
  for (auto t : r.tokens) got += std::to_string(t) + " ";
  INFO("prompt ids " << prompt.size() << ", continuation: " << got);
  const std::vector<std::int32_t> pinned = {1248, 1164, 1917, 1598, 336, 1900, 1905, 1983, 756, 576, 1878, 2035};
  CHECK(r.tokens == pinned);
}
