#include "sampling/stop.h"

#include <algorithm>

namespace cachet {

std::string StopMatcher::feed(const std::string& piece) {
  if (stopped_) return {};
  pending_ += piece;
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < first) first = at, matched_ = s;
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop sequence.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = stopped_ ? std::string() : pending_;
  pending_.clear();
  return out;
}

}  // namespace cachet
