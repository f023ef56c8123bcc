// The deterministic, resumable batch stream (see include/capstep/data.h).
#include "capstep/data.h"

namespace capstep::data {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

BatchStream::BatchStream(std::vector<int32_t> tokens, uint64_t seed, int64_t batch, int64_t seq)
    : tokens_(std::move(tokens)), seed_(seed), batch_(batch), seq_(seq) {
  if (batch_ <= 0 || seq_ <= 0)
    throw Error("batch stream: batch size and sequence length must be positive, got " + std::to_string(batch_) +
                " x " + std::to_string(seq_));
  if (static_cast<int64_t>(tokens_.size()) < seq_ + 1)
    throw Error("batch stream: " + std::to_string(tokens_.size()) + " tokens are too few for a window of " +
                std::to_string(seq_) + " inputs and their next-token targets (need at least " +
                std::to_string(seq_ + 1) + ")");
  check_token_ids(tokens_.data(), tokens_.size(), "batch stream tokens");
}

int64_t BatchStream::window_start(uint64_t index, int64_t row) const {
  // Counter-based: the start depends on (seed, index, row) only, so any batch
  // can be produced directly from the position; no hidden generator state.
  uint64_t s = seed_;
  s = splitmix64(s) ^ index;
  s = splitmix64(s) ^ static_cast<uint64_t>(row);
  const uint64_t r = splitmix64(s);
  // Uniform over the starts of full windows: [0, n - seq - 1].
  const uint64_t count = tokens_.size() - static_cast<uint64_t>(seq_);
  return static_cast<int64_t>((static_cast<unsigned __int128>(r) * count) >> 64);
}

void BatchStream::fill_rows(uint64_t index, int64_t first_row, Array& inputs, Array& targets) const {
  const auto rows_of = [&](const Array& a) {
    return a.dtype() == DType::i32 && a.shape().size() == 2 && a.shape()[1] == seq_ ? a.shape()[0] : int64_t{-1};
  };
  const int64_t rows = rows_of(inputs);
  if (rows < 0 || rows_of(targets) != rows || first_row < 0 || first_row + rows > batch_)
    throw Error("batch stream: fill_rows needs inputs and targets of one type i32[R, " + std::to_string(seq_) +
                "] with rows " + std::to_string(first_row) + "..+R within the batch of " + std::to_string(batch_) +
                ", got " + inputs.type().str() + " and " + targets.type().str());
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t b = 0; b < rows; ++b) {
    const int32_t* w = tokens_.data() + window_start(index, first_row + b);
    for (int64_t t = 0; t < seq_; ++t) {
      in[b * seq_ + t] = w[t];
      tg[b * seq_ + t] = w[t + 1];
    }
  }
}

void BatchStream::fill(uint64_t index, Array& inputs, Array& targets) const {
  // Checked without building a Type: fill must not allocate (the host lane's
  // steady state promises zero heap allocations per step).
  const auto fits = [&](const Array& a) {
    return a.dtype() == DType::i32 && a.shape().size() == 2 && a.shape()[0] == batch_ && a.shape()[1] == seq_;
  };
  if (!fits(inputs) || !fits(targets))
    throw Error("batch stream: fill needs inputs and targets of type " + Type{DType::i32, {batch_, seq_}}.str() +
                ", got " + inputs.type().str() + " and " + targets.type().str());
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    const int32_t* w = tokens_.data() + window_start(index, b);
    for (int64_t t = 0; t < seq_; ++t) {
      in[b * seq_ + t] = w[t];
      tg[b * seq_ + t] = w[t + 1];
    }
  }
}

Batch BatchStream::at(uint64_t index) const {
  const Type t{DType::i32, {batch_, seq_}};
  Batch out{Array(t), Array(t)};
  fill(index, out.inputs, out.targets);
  return out;
}

Batch BatchStream::next() { return at(position_++); }

}  // namespace capstep::data
