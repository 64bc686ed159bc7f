#include "actors/request_actor.hpp"

#include <algorithm>

#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace k3::actors {
namespace {

struct request_state {
  request_options opt;
  scheduler_actor sched;
  std::unique_ptr<tok::incremental_decoder> dec;
  std::string text;         ///< everything emitted so far (for stop-string matching)
  std::size_t held = 0;     ///< bytes at the end of `text` held back as a possible stop prefix
  bool done = false;
  static inline const char* name = "k3.request";
};

/// Longest suffix of s that is a proper prefix of some stop string.
std::size_t stop_prefix_len(const std::string& s, const std::vector<std::string>& stops) {
  std::size_t best = 0;
  for (const auto& st : stops) {
    if (st.empty()) continue;
    for (std::size_t n = std::min(st.size() - 1, s.size()); n > best; --n)
      if (s.compare(s.size() - n, n, st, 0, n) == 0) {
        best = n;
        break;
      }
  }
  return best;
}

request_actor::behavior_type request_fun(request_actor::stateful_pointer<request_state> self, request_options opt,
                                         scheduler_actor sched) {
  self->state.opt = std::move(opt);
  self->state.sched = sched;
  if (const auto& t = self->state.opt.tokenizer) {
    std::vector<std::int32_t> silent = self->state.opt.structural_ids;
    if (self->state.opt.skip_special_tokens)
      silent.insert(silent.end(), t->skippable_specials().begin(), t->skippable_specials().end());
    std::sort(self->state.opt.structural_ids.begin(), self->state.opt.structural_ids.end());
    self->state.dec = std::make_unique<tok::incremental_decoder>(t->bpe(), std::move(silent));
  }
  return {
      [self](token_atom, const engine::token_event& ev) {
        auto& st = self->state;
        if (st.done) return;
        stream_event out;
        out.id = ev.id;
        out.token = ev.token;
        out.logprob = ev.logprob;
        out.top = ev.top;
        out.finished = ev.finished;
        out.finish_reason = ev.finish_reason;
        out.error = ev.error;
        out.message = ev.message;
        out.cached_tokens = ev.cached_tokens;
        if (st.dec) {
          const bool marker = ev.token >= 0 && std::binary_search(st.opt.structural_ids.begin(),
                                                                  st.opt.structural_ids.end(), ev.token);
          std::string piece = ev.token >= 0 ? st.dec->push(ev.token) : std::string();
          if (ev.finished || marker) piece += st.dec->flush();
          // Text stop sequences: emit only what cannot be the start of a stop string.
          std::string pending = st.text.substr(st.text.size() - st.held) + piece;
          st.text.resize(st.text.size() - st.held);
          bool stopped = false;
          for (const auto& s : st.opt.stop_strings) {
            const auto at = pending.find(s);
            if (!s.empty() && at != std::string::npos) {
              pending.resize(at);
              stopped = true;
            }
          }
          st.held = stopped || ev.finished || marker ? 0 : stop_prefix_len(pending, st.opt.stop_strings);
          // Output boundary: invalid byte sequences (a model can emit any bytes) become U+FFFD, so
          // every sink — JSON on the wire in particular — gets valid UTF-8.
          out.text = utf8::sanitize(pending.substr(0, pending.size() - st.held));
          st.text += pending;
          if (stopped && !ev.finished) {
            out.finished = true;
            out.finish_reason = "stop";
            self->send(st.sched, cancel_atom::value, st.opt.id); // frees its KV now
          }
        }
        if (st.opt.sink) st.opt.sink(out);
        if (out.finished) {
          st.done = true;
          self->quit();
        }
      },
      [self](cancel_atom) { self->send(self->state.sched, cancel_atom::value, self->state.opt.id); },
  };
}

} // namespace

request_actor spawn_request(caf::actor_system& sys, request_options opt, scheduler_actor sched) {
  return sys.spawn(request_fun, std::move(opt), std::move(sched));
}

} // namespace k3::actors
