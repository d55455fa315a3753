#include "pipebench/model/synthetic.hpp"

#include "pipebench/core/counter_random.hpp"

namespace pipebench {

namespace {
constexpr std::uint64_t kDataDomain = 0xda7a, kMapDomain = 0xb16a, kInitDomain = 0x1417;
}  // namespace

std::uint64_t mix64(std::initializer_list<std::uint64_t> words) {
  std::uint64_t h = 0x243f6a8885a308d3ull;
  for (auto w : words) h = splitmix64(h ^ splitmix64(w));
  return h;
}

float init_normal(std::uint64_t seed, int piece, int tensor, std::uint64_t index) {
  const std::uint64_t h1 = mix64({kInitDomain, seed, static_cast<std::uint64_t>(piece), static_cast<std::uint64_t>(tensor), index});
  return static_cast<float>(standard_normal(h1, splitmix64(h1)));
}

void synthetic_batch(const ModelSpec& model, int step, std::int64_t first_sample, int count,
                     std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) {
  const auto V = static_cast<std::uint64_t>(model.vocab);
  const std::size_t s = static_cast<std::size_t>(model.seq_len);
  tokens.resize(static_cast<std::size_t>(count) * s);
  targets.resize(tokens.size());
  auto next_of = [&](std::uint64_t tok) { return mix64({kMapDomain, model.seed, tok}) % V; };
  for (int b = 0; b < count; ++b) {
    const auto sample = static_cast<std::uint64_t>(first_sample + b);
    const auto key = [&](std::uint64_t pos) {
      return mix64({kDataDomain, model.seed, static_cast<std::uint64_t>(step), sample, pos});
    };
    std::uint64_t tok = key(0) % V;
    for (std::size_t t = 0; t <= s; ++t) {
      if (t < s) tokens[static_cast<std::size_t>(b) * s + t] = static_cast<std::int32_t>(tok);
      if (t > 0) targets[static_cast<std::size_t>(b) * s + t - 1] = static_cast<std::int32_t>(tok);
      const std::uint64_t h = key(t + 1);
      tok = (h % 10 == 0) ? (h >> 8) % V : next_of(tok);
    }
  }
}

}  // namespace pipebench
