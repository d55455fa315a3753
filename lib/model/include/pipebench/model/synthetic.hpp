// Deterministic initial weights and synthetic training data, shared by every
// backend so that every split of a job starts from the same model and sees
// the same data (SPEC §5):
//  - a weight depends only on (seed, piece, tensor, element): the piece id is
//    0 for the embedding, 1 + i for block i, layers + 1 for the head;
//  - a token depends only on (seed, step, sample, position), where a sample
//    is its global position in the step's batch (0 .. global batch - 1), so
//    every split of one global batch into micro-batches x micro-batch size x
//    replicas trains on the same samples (docs/model.md, "Synthetic data").
// Counter-based (SplitMix64 hashing), so any element can be generated alone.
#pragma once

#include <cstdint>
#include <vector>

#include "pipebench/core/job.hpp"

namespace pipebench {

// A 64-bit hash of the words (SplitMix64 finaliser chained over them).
std::uint64_t mix64(std::initializer_list<std::uint64_t> words);

// Standard normal from the hash of (seed, piece, tensor, index).
float init_normal(std::uint64_t seed, int piece, int tensor, std::uint64_t index);

// The synthetic task: sequences that follow a fixed random bigram map of the
// vocabulary (derived from the seed) with 10% uniform noise, so a model can
// learn it and the loss falls. Fills `tokens` and `targets` (the next token)
// for the `count` samples first_sample .. first_sample + count - 1 of the
// step's batch: count x seq_len each, row-major.
void synthetic_batch(const ModelSpec& model, int step, std::int64_t first_sample, int count,
                     std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);

}  // namespace pipebench
