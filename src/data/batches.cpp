// The deterministic, resumable batch stream (see include/capstep/data.h).
#include "capstep/data.h"

namespace capstep::data {

BatchStream::BatchStream(const std::vector<int32_t>& tokens, uint64_t seed, int64_t batch, int64_t seq, int64_t vocab)
    : seed_(seed), batch_(batch), seq_(seq) {
  check_sizes(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw Error("batch stream tokens: token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  tokens_ = std::make_shared<const TokenIds>(tokens, vocab);
  size_ = tokens.size();
}

BatchStream::BatchStream(TokenIds tokens, uint64_t seed, int64_t batch, int64_t seq)
    : BatchStream(std::make_shared<const TokenIds>(std::move(tokens)), 0, 0, seed, batch, seq, true) {}

BatchStream::BatchStream(std::shared_ptr<const TokenSource> tokens, size_t begin, size_t end, uint64_t seed,
                         int64_t batch, int64_t seq)
    : BatchStream(std::move(tokens), begin, end, seed, batch, seq, false) {}

BatchStream::BatchStream(std::shared_ptr<const TokenSource> tokens, size_t begin, size_t end, uint64_t seed,
                         int64_t batch, int64_t seq, bool all)
    : tokens_(std::move(tokens)), seed_(seed), batch_(batch), seq_(seq) {
  if (tokens_ && all) end = tokens_->size();
  if (!tokens_ || begin > end || end > tokens_->size())
    throw Error("batch stream: the range [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") is not within the " + std::to_string(tokens_ ? tokens_->size() : 0) + " tokens");
  begin_ = begin;
  size_ = end - begin;
  check_sizes(size_);
}

void BatchStream::check_sizes(size_t n) const {
  if (batch_ <= 0 || seq_ <= 0)
    throw Error("batch stream: batch size and sequence length must be positive, got " + std::to_string(batch_) +
                " x " + std::to_string(seq_));
  if (static_cast<int64_t>(n) < seq_ + 1)
    throw Error("batch stream: " + std::to_string(n) + " tokens are too few for a window of " +
                std::to_string(seq_) + " inputs and their next-token targets (need at least " +
                std::to_string(seq_ + 1) + ")");
}

int64_t BatchStream::window_start(uint64_t index, int64_t row) const {
  // Counter-based: the start depends on (seed, index, row) only, so any batch
  // can be produced directly from the position; no hidden generator state.
  uint64_t s = seed_;
  s = splitmix64(s) ^ index;
  s = splitmix64(s) ^ static_cast<uint64_t>(row);
  const uint64_t r = splitmix64(s);
  // Uniform over the starts of full windows: [0, n - seq - 1].
  const uint64_t count = size_ - static_cast<uint64_t>(seq_);
  return static_cast<int64_t>((static_cast<unsigned __int128>(r) * count) >> 64);
}

void BatchStream::copy_window(int64_t start, int32_t* in, int32_t* tg) const {
  const size_t at = begin_ + static_cast<size_t>(start);
  tokens_->copy_to(at, static_cast<size_t>(seq_), in);
  tokens_->copy_to(at + 1, static_cast<size_t>(seq_), tg);
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
    copy_window(window_start(index, first_row + b), in + b * seq_, tg + b * seq_);
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
    copy_window(window_start(index, b), in + b * seq_, tg + b * seq_);
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
