// Stop sequences over streamed text: text arrives piece by piece (one token's text at a time) and a stop
// sequence may span pieces. The matcher holds back only the tail that could still begin a stop sequence;
// everything before a match is released, the match and anything after it never are.
#pragma once

#include <string>
#include <vector>

namespace cachet {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends a piece; returns the text that is now safe to emit. After a match, stopped() is true and
  // further pieces are ignored.
  std::string feed(const std::string& piece);
  // At the end of generation (no match): the held-back tail.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop sequence that matched ("" before)

 private:
  std::vector<std::string> stops_;
  std::string matched_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace cachet
