// The stop-string matcher over streamed pieces: the input is split into stop strings and pieces. What it
// releases must be a prefix of the text holding no stop sequence; after a match the text goes on with one,
// and without a match it is the whole text, which then holds none.
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "sampling/stop.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Layout: n_stops, then each stop as (len, bytes), then the text; piece boundaries from a second pass.
  size_t i = 0;
  auto byte = [&]() -> int { return i < size ? data[i++] : -1; };
  const int n_stops = byte() % 5;
  std::vector<std::string> stops;
  for (int s = 0; s < n_stops; ++s) {
    const int len = byte() % 9 + 1;
    std::string stop;
    for (int k = 0; k < len && i < size; ++k) stop += static_cast<char>(byte());
    if (!stop.empty()) stops.push_back(stop);
  }
  const std::string text(reinterpret_cast<const char*>(data) + i, size - i);
  cachet::StopMatcher m(stops);
  std::string got;
  size_t pos = 0, step = 1;
  while (pos < text.size() && !m.stopped()) {
    const size_t n = std::min(text.size() - pos, step);
    got += m.feed(text.substr(pos, n));
    pos += n;
    step = step % 7 + 1;
  }
  if (!m.stopped()) got += m.flush();
  if (text.compare(0, got.size(), got) != 0) std::abort();  // a prefix of the text
  for (const auto& s : stops)
    if (got.find(s) != std::string::npos) std::abort();  // holding no stop sequence
  if (m.stopped()) {
    bool follows = false;
    for (const auto& s : stops) follows |= text.compare(got.size(), s.size(), s) == 0;
    if (!follows) std::abort();
  } else if (got != text) {
    std::abort();
  }
  return 0;
}
