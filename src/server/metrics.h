// Prometheus text exposition for the server: counters, gauges and cumulative histograms. Every method is
// thread-safe; render() writes the text format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cachet::server {

class Histogram {
 public:
  Histogram(std::string name, std::string help, std::vector<double> upper_bounds);
  void observe(double v);
  void render(std::string* out) const;
  // Quantile estimate from the buckets (linear within a bucket), for logs and tests; 0 when empty.
  double quantile(double q) const;
  int64_t count() const;

 private:
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// A counter with one label (e.g. requests by status code).
class LabeledCounter {
 public:
  LabeledCounter(std::string name, std::string help, std::string label);
  void add(const std::string& value, int64_t n = 1);
  int64_t get(const std::string& value) const;
  void render(std::string* out) const;

 private:
  std::string name_, help_, label_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> values_;
};

// Appends "# HELP", "# TYPE" and one sample line.
void render_scalar(std::string* out, const std::string& name, const std::string& type, const std::string& help,
                   double value);

// Exponential bucket bounds: start, start*factor, ... (n bounds).
std::vector<double> exponential_buckets(double start, double factor, int n);

}  // namespace cachet::server
