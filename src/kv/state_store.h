// StateStore: the per-sequence recurrent state of a hybrid model's gated delta net layers (Qwen3.5, Qwen3-Next),
// kept next to the paged KV blocks. A sequence holds one slot while it runs; a slot holds, for each recurrent
// layer, the conv's last (kernel - 1) inputs and the d x d state matrix of every value head, all f32, valid after
// the sequence's last computed position. Slots are integer ids (the model reads them through a ForwardBatch);
// allocation is a check/commit pair like the block pool's, and frees go to a LIFO list. The bookkeeping
// (allocate, free, counts, check) needs no model: a StateStore of zero-width layers is just the slot pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"

namespace cachet {

struct ModelConfig;

using StateSlot = int32_t;

class StateStore {
 public:
  // n_slots sequences' states for cfg's recurrent layers.
  StateStore(const ModelConfig& cfg, int n_slots);
  // The bookkeeping alone: n_slots slots of `floats_per_slot` values each, over `n_layers` equal layers.
  StateStore(int n_slots, int n_layers, int64_t conv_floats, int64_t ssm_floats);

  int n_slots() const { return n_slots_; }
  int n_free() const { return static_cast<int>(free_.size()); }
  int n_used() const { return n_slots_ - n_free(); }
  bool can_allocate() const { return !free_.empty(); }
  // A free slot (its contents undefined until a sequence's first position zeroes it), or nothing.
  std::optional<StateSlot> allocate();
  void free(StateSlot s);
  bool in_use(StateSlot s) const { return s >= 0 && s < n_slots_ && used_[s]; }

  int n_layers() const { return n_layers_; }
  int64_t conv_floats() const { return conv_floats_; }  // per slot and layer
  int64_t ssm_floats() const { return ssm_floats_; }    // per slot and layer
  int64_t bytes_per_slot() const { return n_layers_ * (conv_floats_ + ssm_floats_) * 4; }
  int64_t total_bytes() const { return bytes_per_slot() * n_slots_; }

  // Recurrent layer r (0-based among the recurrent layers) of slot s.
  float* conv(StateSlot s, int r) { return data_.data() + offset(s, r); }
  float* ssm(StateSlot s, int r) { return data_.data() + offset(s, r) + conv_floats_; }
  // Slot s whole: bytes_per_slot() bytes, every layer's conv window then state matrix.
  const float* slot_data(StateSlot s) const { return data_.data() + offset(s, 0); }
  // Every layer of slot s to zero (a sequence at position 0) / copied from src (a fork: n > 1, beams).
  void zero(StateSlot s);
  void copy(StateSlot src, StateSlot dst);

  // Every invariant (free list and use flags agree, no slot twice); empty when all hold.
  std::string check() const;

 private:
  int64_t offset(StateSlot s, int r) const {
    return (static_cast<int64_t>(s) * n_layers_ + r) * (conv_floats_ + ssm_floats_);
  }

  int n_slots_;
  int n_layers_;
  int64_t conv_floats_, ssm_floats_;
  AlignedBuffer<float> data_;     // [n_slots, n_layers, conv_floats + ssm_floats]
  std::vector<StateSlot> free_;   // LIFO: the most recently freed slot (warm in cache) first
  std::vector<uint8_t> used_;     // [n_slots]
};

}  // namespace cachet
