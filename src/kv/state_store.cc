#include "kv/state_store.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "model/config.h"

namespace cachet {

StateStore::StateStore(const ModelConfig& cfg, int n_slots)
    : StateStore(n_slots, static_cast<int>(cfg.n_recurrent_layers()), cfg.conv_state_floats(), cfg.ssm_state_floats()) {}

StateStore::StateStore(int n_slots, int n_layers, int64_t conv_floats, int64_t ssm_floats)
    : n_slots_(n_slots), n_layers_(n_layers), conv_floats_(conv_floats), ssm_floats_(ssm_floats) {
  CACHET_CHECK(n_slots >= 0 && n_layers >= 0 && conv_floats >= 0 && ssm_floats >= 0);
  data_.resize(static_cast<size_t>(n_slots) * n_layers * (conv_floats + ssm_floats));
  data_.zero();
  used_.assign(static_cast<size_t>(n_slots), 0);
  for (StateSlot s = n_slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 handed out first
}

std::optional<StateSlot> StateStore::allocate() {
  if (free_.empty()) return std::nullopt;
  const StateSlot s = free_.back();
  free_.pop_back();
  used_[s] = 1;
  return s;
}

void StateStore::free(StateSlot s) {
  CACHET_CHECK(in_use(s));
  used_[s] = 0;
  free_.push_back(s);
}

void StateStore::zero(StateSlot s) {
  CACHET_CHECK(s >= 0 && s < n_slots_);
  std::memset(conv(s, 0), 0, static_cast<size_t>(bytes_per_slot()));
}

void StateStore::copy(StateSlot src, StateSlot dst) {
  CACHET_CHECK(src >= 0 && src < n_slots_ && dst >= 0 && dst < n_slots_);
  if (src != dst) std::memcpy(conv(dst, 0), conv(src, 0), static_cast<size_t>(bytes_per_slot()));
}

std::string StateStore::check() const {
  std::vector<uint8_t> seen(static_cast<size_t>(n_slots_), 0);
  for (StateSlot s : free_) {
    if (s < 0 || s >= n_slots_) return "a free slot " + std::to_string(s) + " outside the store";
    if (seen[s]) return "slot " + std::to_string(s) + " is free twice";
    if (used_[s]) return "slot " + std::to_string(s) + " is both free and in use";
    seen[s] = 1;
  }
  const int used = static_cast<int>(std::count(used_.begin(), used_.end(), 1));
  if (used + n_free() != n_slots_)
    return std::to_string(used) + " used + " + std::to_string(n_free()) + " free != " + std::to_string(n_slots_) +
           " slots";
  return {};
}

}  // namespace cachet
